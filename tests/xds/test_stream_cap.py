"""The ADS stream cap is an option (``--max-streams``); a stream over it is refused, and said so."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest

from sr_control.compiler.protos import LISTENER
from tests.xds.xds_support import AdsClient, config_text, free_port, sotw_request, wait_for

VLLM_SR = str(Path(sys.executable).parent / "vllm-sr")


def status(port: int) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def test_a_stream_over_the_cap_is_refused_with_a_log_line_and_a_later_one_served(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(config_text({"public": 8801}))
    xds, status_port = free_port(), free_port()
    log = tmp_path / "xds.log"
    plane = subprocess.Popen(
        [
            VLLM_SR,
            "xds",
            "serve",
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(xds),
            "--status-port",
            str(status_port),
            "--max-streams",
            "1",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    first = second = third = None
    try:
        wait_for(lambda: _up(status_port), timeout=30, what="the control plane")
        first = AdsClient(xds)
        first.send(sotw_request(LISTENER))
        assert first.receive(timeout=10).type_url == LISTENER
        wait_for(lambda: len(status(status_port)["nodes"]) == 1, what="the first node to show")

        second = AdsClient(xds)
        second.send(sotw_request(LISTENER))
        wait_for(lambda: second._call.done(), what="the second stream to be refused")  # type: ignore[union-attr]
        assert second._call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[union-attr]
        assert "--max-streams" in second._call.details()  # type: ignore[union-attr]
        line = wait_for(
            lambda: next((line for line in log.read_text().splitlines() if "ads stream refused" in line), None),
            what="the log line",
        )
        assert "max_streams=1" in line

        first.close()
        first = None
        wait_for(lambda: status(status_port)["nodes"] == [], what="the first stream to close")
        third = AdsClient(xds)
        third.send(sotw_request(LISTENER))
        assert third.receive(timeout=10).type_url == LISTENER
    finally:
        for client in (first, second, third):
            if client is not None:
                client.close()
        plane.terminate()
        plane.wait(10)


def _up(port: int) -> bool:
    try:
        return bool(status(port)["version"])
    except OSError:
        return False


@pytest.mark.parametrize("value", ["0", "-3"])
def test_the_cap_must_be_positive(tmp_path: Path, cli, value: str) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "config.yaml"
    config.write_text(config_text({"public": 8801}))
    result = cli("xds", "serve", "--config", str(config), "--port", "0", "--status-port", "0", "--max-streams", value)
    assert result.returncode == 2
    assert "--max-streams" in result.stderr
