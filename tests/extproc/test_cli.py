"""``vllm-sr extproc serve`` as an operator runs it: help, refusals, workers, draining."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tests.e2e.envoy_proc import free_port
from tests.extproc.harness import VLLM_SR, SidecarProc, World, get_json, metric
from tests.extproc.test_fuzz import VALID, _exchange


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([VLLM_SR, "extproc", "serve", *args], capture_output=True, text=True, timeout=60)


def test_help_names_every_option() -> None:
    out = run("--help")
    assert out.returncode == 0
    for flag in (
        "--xds",
        "--port",
        "--status-port",
        "--status-host",
        "--workers",
        "--listeners",
        "--version-wait-ms",
        "--forwarding",
        "--drain-s",
    ):
        assert flag in out.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--xds", "nowhere"), "is not HOST:PORT"),
        (("--xds", "127.0.0.1:1", "--listeners", "Public,"), "give 'all' or listener names"),
        (("--xds", "127.0.0.1:1", "--forwarding", "proxy"), "envoy or sidecar"),
        (("--xds", "127.0.0.1:1", "--workers", "0"), "--workers"),
    ],
)
def test_bad_options_exit_2_with_one_line(args: tuple[str, ...], says: str) -> None:
    out = run(*args)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_status_port_listens_where_status_host_says(workers: str) -> None:
    """The chart keeps ext_proc on loopback and opens /metrics to Prometheus: two addresses."""
    port = free_port()
    proc = subprocess.Popen(
        [
            VLLM_SR,
            "extproc",
            "serve",
            "--xds",
            "127.0.0.1:1",
            "--port",
            str(free_port()),
            "--status-port",
            str(port),
            "--status-host",
            "127.0.0.2",
            "--workers",
            workers,
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.2:{port}/status", timeout=2) as r:
                    assert r.status == 200 and "workers" in json.loads(r.read())
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline and proc.poll() is None, (
                    "the status port never answered on 127.0.0.2"
                )
                time.sleep(0.2)
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_taken_port_exits_2_naming_it(workers: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run("--xds", "127.0.0.1:1", "--port", str(port), "--status-port", str(free_port()), "--workers", workers)
    assert out.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.envoy
def test_two_workers_share_the_port_and_one_metrics_view(
    world: World, tmp_path_factory: pytest.TempPathFactory
) -> None:
    sidecar = SidecarProc(tmp_path_factory.mktemp("workers"), world.plane.port, workers=2).wait()
    try:
        status = sidecar.status()["workers"]
        assert len(status) == 2 and len({w["pid"] for w in status}) == 2 and all(w["ready"] for w in status)
        metadata = [
            ("x-vsr-listener", "v50"),
            ("x-vsr-api", "systemone"),
            ("x-vsr-config-version", world.plane_sidecar_version("v50")),
        ]
        for _ in range(12):  # each exchange is a new connection: the kernel spreads them
            response = _exchange(
                sidecar.port, metadata, "/v1/systemone", [("content-type", "application/json")], b"{not json"
            )[-1]
            assert response.immediate_response.status.code == 422
        text = sidecar.metrics()
        assert metric(text, "vsr_extproc_requests_total", listener="v50", api="systemone", status="422") == 12
        nodes = {n["id"]: n for n in get_json(world.plane.status_url)[1]["nodes"]}
        assert all(w["node"] in nodes for w in status)  # each worker is a node of the control plane
        # ... and each tells it the one status port they share (vllm-sr status reads it once).
        assert {nodes[w["node"]]["status_address"] for w in status} == {f"127.0.0.1:{sidecar.status_port}"}
    finally:
        assert sidecar.stop() == 0


@pytest.mark.envoy
def test_sigterm_lets_open_streams_finish(world: World, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A stream waiting for a config version the sidecar never gets is open when SIGTERM comes: it
    still gets its answer (503 after the wait), and the sidecar exits 0 once it has."""
    import threading

    sidecar = SidecarProc(tmp_path_factory.mktemp("drain"), world.plane.port, args=("--version-wait-ms", "1500")).wait()
    got: list[int] = []
    metadata = [("x-vsr-listener", "v50"), ("x-vsr-api", "systemone"), ("x-vsr-config-version", "ffffffffffffffff")]
    body = json.dumps(VALID).encode()
    client = threading.Thread(
        target=lambda: got.append(
            _exchange(sidecar.port, metadata, "/v1/systemone", [], body)[-1].immediate_response.status.code
        )
    )
    client.start()
    import time

    time.sleep(0.5)
    assert sidecar.stop() == 0
    client.join(10)
    assert got == [503]
