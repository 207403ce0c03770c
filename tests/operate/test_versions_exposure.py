"""A version's source text (``GET /versions/VERSION``) is answered to the control plane's own host
only: the status port listens on every address (Envoys and Prometheus reach it), and the text
may say more than the compiled config (a rewrite's header values, comments)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr_control.compiler import Settings
from sr_control.xds import ControlPlane
from tests.conftest import run_cli
from tests.xds.xds_support import config_text


def _outward_address() -> str:
    """This host's address on its way out (no packet is sent): a caller from it is not loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        return str(probe.getsockname()[0])


def _get(host: str, port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    path = tmp_path / "config.yaml"
    path.write_text(config_text({"public": 8801}))
    plane = ControlPlane(path, Settings(), host="0.0.0.0", port=0, status_port=0, poll_interval=0.005)
    plane.start()
    yield plane
    plane.stop()


def test_the_source_text_is_answered_on_loopback_only(plane: ControlPlane) -> None:
    outward = _outward_address()
    if outward.startswith("127."):
        pytest.skip("this host has no address but loopback")
    port = plane.status_port
    live = json.loads(_get("127.0.0.1", port, "/versions")[1])["live"]
    assert _get("127.0.0.1", port, f"/versions/{live}") == (200, plane.config.read_bytes())

    # From the host's outward address: the list and /status still answer, the text does not.
    assert json.loads(_get(outward, port, "/versions")[1])["live"] == live
    assert _get(outward, port, "/status")[0] == 200
    status, body = _get(outward, port, f"/versions/{live}")
    assert status == 403 and "answered on this host only (loopback)" in json.loads(body)["detail"]

    # The commands that need the text say so, and exit 2.
    done = run_cli("config", "rollback", live, "--xds", f"{outward}:{port}")
    assert done.returncode == 2 and "serves a version's source text to loopback only" in done.stderr
    got = run_cli("config", "get", "--xds", f"{outward}:{port}")
    assert got.returncode == 2 and "serves a version's source text to loopback only" in got.stderr
    here = run_cli("config", "get", "--xds", f"127.0.0.1:{port}")
    assert here.returncode == 0 and here.stdout == plane.config.read_text()
    # apply cannot check for an edit not yet live without the text: it writes nothing.
    before = plane.config.read_text()
    edited = plane.config.with_name("edited.yaml")
    edited.write_text(config_text({"public": 8802}))
    applied = run_cli("config", "apply", str(edited), "--xds", f"{outward}:{port}")
    assert applied.returncode == 2 and "loopback only" in applied.stderr and plane.config.read_text() == before
