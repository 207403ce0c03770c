"""``vllm-sr xds serve`` refusing what it cannot use, as a user sees it (exit 2, no traceback)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.xds.xds_support import config_text


def test_a_missing_config_exits_2(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    result = cli(
        "xds",
        "serve",
        "--config",
        str(tmp_path / "nope.yaml"),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--status-port",
        "0",
    )
    assert result.returncode == 2
    assert "nope.yaml: error: cannot read: no such file" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("taken", ["--status-port", "--port"])
def test_a_taken_port_exits_2(tmp_path: Path, cli, taken: str) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "config.yaml"
    config.write_text(config_text({"public": 8801}))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        ports = {"--port": "0", "--status-port": "0"} | {taken: str(port)}
        result = cli(
            "xds", "serve", "--config", str(config), "--host", "127.0.0.1", *[x for kv in ports.items() for x in kv]
        )
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
