"""`vllm-sr serve`: the local stack as `make serve` runs it, started and stopped like a user does."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sr_control.stack import Ports
from tests.conftest import BIN, ROOT

SEED_002_CURL = json.loads((ROOT / "examples" / "requests" / "seed-002-curl.json").read_text())


def _free_offset() -> int:
    for _ in range(50):
        offset = random.randrange(20000, 40000, 10)
        ports = Ports().shifted(offset)
        try:
            for port in (ports.runtime, ports.listener, ports.xds, ports.xds_status, ports.sidecar, ports.sidecar_status, ports.admin):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return offset
    raise RuntimeError("no free set of ports")


def _get(url: str, body: dict | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.mark.slow
def test_serve_runs_the_stack_answers_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    offset = _free_offset()
    ports = Ports().shifted(offset)
    out = (tmp_path / "out.txt").open("w")
    stack = subprocess.Popen(
        [str(BIN / "vllm-sr"), "serve", "--port-offset", str(offset), "--state-dir", str(tmp_path / "state")],
        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while "Ctrl-C stops everything" not in (tmp_path / "out.txt").read_text():
            assert stack.poll() is None, (tmp_path / "out.txt").read_text()
            assert time.monotonic() < deadline, "the stack did not come up"
            time.sleep(0.2)
        summary = (tmp_path / "out.txt").read_text()
        assert f"http://127.0.0.1:{ports.runtime}" in summary and re.search(rf"listener local +http://127.0.0.1:{ports.listener}", summary)

        # The seed 002 curl, against the listener (Envoy, the sidecar, the runtime) and the runtime.
        for port in (ports.listener, ports.runtime):
            status, answer = _get(f"http://127.0.0.1:{port}/v1/systemone", SEED_002_CURL)
            assert status == 200 and answer["answers"]["urgent"]["type"] == "noul" and 0 <= answer["answers"]["urgent"]["noul"] <= 1
        direct = _get(f"http://127.0.0.1:{ports.runtime}/v1/systemone", SEED_002_CURL)[1]
        assert answer == direct  # the listener answers exactly what the runtime does

        # Envoy took the embedded config over xDS: an API the listener does not offer is its 404.
        status, body = _get(f"http://127.0.0.1:{ports.listener}/v1/chat/completions", {})
        assert status == 404 and "listener 'local'" in body["detail"]["message"]

        # The served copy of the config is live: the control plane reports its version.
        status, doc = _get(f"http://127.0.0.1:{ports.xds_status}/status")
        assert status == 200 and doc["version"]

        children = [int(p) for p in subprocess.run(["pgrep", "-P", str(stack.pid)], capture_output=True, text=True).stdout.split()]
        assert len(children) == 3  # the runtime, the sidecar and Envoy; the control plane runs in the supervisor
        stack.send_signal(signal.SIGINT)
        assert stack.wait(timeout=30) == 0
        assert [pid for pid in children if _alive(pid)] == [], "children outlived the stack"
    finally:
        if stack.poll() is None:
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait()
        out.close()


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has finished: its parent, the stack, is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_serve_refuses_a_taken_port_before_starting_anything(tmp_path: Path) -> None:
    offset = _free_offset()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", Ports().shifted(offset).runtime))
        run = subprocess.run(
            [str(BIN / "vllm-sr"), "serve", "--port-offset", str(offset), "--state-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=60,
        )
    assert run.returncode == 1
    assert f"port {Ports().shifted(offset).runtime} for the runtime is taken" in run.stderr and "Traceback" not in run.stderr
