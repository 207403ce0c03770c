"""The control plane in-process: status port, metrics, and edits served as they are saved."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr_control.compiler import Settings
from sr_control.compiler.protos import LISTENER, SIDECAR
from sr_control.xds import ControlPlane
from tests.xds.xds_support import AdsClient, config_text, sotw_request, wait_for


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[tuple[ControlPlane, Path]]:
    path = tmp_path / "config.yaml"
    path.write_text(config_text({"public": 8801}))
    plane = ControlPlane(path, Settings(), host="127.0.0.1", port=0, status_port=0, poll_interval=0.005)
    plane.start()
    yield plane, path
    plane.stop()


def test_status_names_the_version_the_error_and_each_node(plane: tuple[ControlPlane, Path]) -> None:
    cp, path = plane
    client = AdsClient(cp.port)
    try:
        client.send(sotw_request(LISTENER))
        pushed = client.receive()
        client.send(sotw_request(LISTENER, pushed.version_info, pushed.nonce))
        wait_for(lambda: json.loads(get(cp.status_port, "/status")[1])["nodes"][0]["types"]["listeners"]["acked"])
        status = json.loads(get(cp.status_port, "/status")[1])
        assert status["version"] == cp.reloader.snapshot.version  # type: ignore[union-attr]
        assert status["config"] == str(path)
        assert status["last_error"] is None
        (node,) = status["nodes"]
        assert node["id"] == "envoy-test"
        assert node["types"]["listeners"] == {"pushed": pushed.version_info, "acked": pushed.version_info, "nack": None}

        path.write_text("version: 2\nlisteners:\n  - {name: public, port: 8801, bogus: 1}\n")
        error = wait_for(lambda: json.loads(get(cp.status_port, "/status")[1])["last_error"])
        assert error["result"] == "invalid"
        assert error["problems"][0]["field"] == "listeners[0].bogus"
        assert error["problems"][0]["line"] == 3
        assert client.nothing_within(0.1)  # nothing is pushed for an invalid edit
    finally:
        client.close()


def test_an_edit_is_pushed_to_a_connected_node(plane: tuple[ControlPlane, Path]) -> None:
    cp, path = plane
    client = AdsClient(cp.port)
    try:
        client.send(sotw_request(LISTENER))
        first = client.receive()
        client.send(sotw_request(LISTENER, first.version_info, first.nonce))
        path.write_text(config_text({"public": 8801, "internal": 8802}))
        pushed = client.receive()
        assert len(pushed.resources) == 2
    finally:
        client.close()


def test_metrics_count_reloads_and_pushes(plane: tuple[ControlPlane, Path]) -> None:
    cp, path = plane
    client = AdsClient(cp.port)
    try:
        client.send(sotw_request(LISTENER))
        first = client.receive()
        client.send(sotw_request(LISTENER, first.version_info, first.nonce))
        wait_for(
            lambda: 'vsr_xds_pushes_total{result="ack",type="listeners"} 1.0' in get(cp.status_port, "/metrics")[1]
        )
        text = get(cp.status_port, "/metrics")[1]
        assert f'vsr_config_version{{version="{cp.reloader.snapshot.version}"}} 1.0' in text  # type: ignore[union-attr]
        assert 'vsr_config_reload_total{result="ok"} 1.0' in text
        assert 'vsr_xds_streams{protocol="sotw"} 1.0' in text
    finally:
        client.close()


def test_healthz_is_ok_once_a_version_is_served(plane: tuple[ControlPlane, Path]) -> None:
    cp, _ = plane
    assert get(cp.status_port, "/healthz") == (200, "serving\n")
    assert get(cp.status_port, "/nope")[0] == 404


def test_healthz_is_503_until_a_valid_config_arrives(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("listeners: [")
    cp = ControlPlane(path, Settings(), host="127.0.0.1", port=0, status_port=0, poll_interval=0.005)
    cp.start()
    try:
        assert get(cp.status_port, "/healthz")[0] == 503
        path.write_text(config_text({"public": 8801}))
        wait_for(lambda: get(cp.status_port, "/healthz")[0] == 200)
    finally:
        cp.stop()


def test_status_names_each_listeners_version_as_its_responses_carry_it(plane: tuple[ControlPlane, Path]) -> None:
    """``version`` is the whole config's; ``listener_versions`` holds what each listener's
    responses carry as x-vsr-config-version, which an edit of another listener leaves alone."""
    cp, path = plane
    first = json.loads(get(cp.status_port, "/status")[1])
    sidecar = cp.reloader.snapshot.named(SIDECAR)  # type: ignore[union-attr]
    assert first["listener_versions"] == {"public": sidecar["sidecar/public"].version}
    path.write_text(config_text({"public": 8801, "second": 8802}))
    now = wait_for(lambda: (s := json.loads(get(cp.status_port, "/status")[1]))["version"] != first["version"] and s)
    assert set(now["listener_versions"]) == {"public", "second"}
    assert now["listener_versions"]["public"] == first["listener_versions"]["public"]  # untouched by the edit
