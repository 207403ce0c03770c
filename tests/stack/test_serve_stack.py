"""`vllm-sr serve`: the local stack as `make serve` runs it, started and stopped like a user does."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from jevcompat import runner

from sr_control.stack import Ports
from tests.conftest import BIN, ROOT

SEED_002_CURL = json.loads((ROOT / "examples" / "requests" / "seed-002-curl.json").read_text())


def _free_offset() -> int:
    for _ in range(50):
        offset = random.randrange(20000, 40000, 10)
        ports = Ports().shifted(offset)
        try:
            for port in (
                ports.runtime,
                ports.listener,
                ports.xds,
                ports.xds_status,
                ports.sidecar,
                ports.sidecar_status,
                ports.admin,
            ):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return offset
    raise RuntimeError("no free set of ports")


def start_stack(
    args: list[str], log: Path, env: dict[str, str] | None = None, timeout_s: float = 180
) -> subprocess.Popen[bytes]:
    """`vllm-sr serve ARGS` in a session of its own, its output in `log`, once it says it is up."""
    with log.open("w") as out:
        stack = subprocess.Popen(
            [str(BIN / "vllm-sr"), "serve", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    deadline = time.monotonic() + timeout_s
    try:
        while "Ctrl-C stops everything" not in log.read_text():
            assert stack.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the stack did not come up"
            time.sleep(0.2)
    except BaseException:
        if stack.poll() is None:  # a stack that never came up is not left running
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait()
        raise
    return stack


def _get(url: str, body: dict | None = None, **headers: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.mark.slow
def test_serve_runs_the_stack_answers_through_the_listener_and_drains_on_sigterm(tmp_path: Path) -> None:
    offset = _free_offset()
    ports = Ports().shifted(offset)
    stack = start_stack(["--port-offset", str(offset), "--state-dir", str(tmp_path / "state")], tmp_path / "out.txt")
    try:
        summary = (tmp_path / "out.txt").read_text()
        assert f"http://127.0.0.1:{ports.runtime}" in summary and re.search(
            rf"listener local +http://127.0.0.1:{ports.listener}", summary
        )

        # The seed 002 curl, against the listener (Envoy, the sidecar, the runtime) and the runtime.
        status, answer = _get(f"http://127.0.0.1:{ports.listener}/v1/systemone", SEED_002_CURL)
        assert (
            status == 200
            and answer["answers"]["urgent"]["type"] == "noul"
            and 0 <= answer["answers"]["urgent"]["noul"] <= 1
        )
        # The runtime answers only the stack: without the key made at this start, 401; with it
        # (as the sidecar calls it), what the listener answered.
        status, refused = _get(f"http://127.0.0.1:{ports.runtime}/v1/systemone", SEED_002_CURL)
        assert status == 401 and refused["reason"] == "missing_key"
        key = child_environ(stack.pid, "vllm-srun")["VLLM_SR_RUNTIME_KEY"]
        assert (
            answer
            == _get(f"http://127.0.0.1:{ports.runtime}/v1/systemone", SEED_002_CURL, authorization=f"Bearer {key}")[1]
        )

        # The official conformance suite, against the listener: 32/32 MUST.
        report = runner.run(f"http://127.0.0.1:{ports.listener}", timeout=60)
        failed = {r.id: [f.message for f in r.findings] for r in report.results if r.status == "fail"}
        assert report.verdict == "conformant" and report.summary()["MUST"]["passed"] == 32, failed
        assert set(failed) <= {
            "request.unknown-fields"
        }  # vllm-sr/5.0 names unknown members (docs/runtime/conformance.md)

        # Envoy took the embedded config over xDS: an API the listener does not offer is its 404.
        status, body = _get(f"http://127.0.0.1:{ports.listener}/v1/chat/completions", {})
        assert status == 404 and "listener 'local'" in body["detail"]["message"]

        # The served copy of the config is live; the sidecar, on its shifted ports, holds it.
        status, doc = _get(f"http://127.0.0.1:{ports.xds_status}/status")
        assert status == 200 and doc["version"]
        status, sidecar = _get(f"http://127.0.0.1:{ports.sidecar_status}/status")
        assert (
            status == 200
            and sidecar["workers"][0]["ready"]
            and sidecar["workers"][0]["socket"].endswith("/extproc.sock")
        )

        children = [
            int(p)
            for p in subprocess.run(["pgrep", "-P", str(stack.pid)], capture_output=True, text=True).stdout.split()
        ]
        assert len(children) == 3  # the runtime, the sidecar and Envoy; the control plane runs in the supervisor

        # SIGTERM while requests are in flight: every request sent before it is answered; after
        # it Envoy takes no new connection; then every part exits.
        outcomes, stopping = _traffic_during(
            lambda: stack.send_signal(signal.SIGTERM), f"http://127.0.0.1:{ports.listener}/v1/systemone/batch"
        )
        assert stack.wait(timeout=60) == 0
        seen = [(o[0], round(o[1] - stopping, 3), round(o[2] - stopping, 3)) for o in outcomes]
        # Every request Envoy took was answered in full: no 5xx, no reset mid-answer. Only a
        # connection made as the listener closed (sent within the moment SIGTERM came) is refused.
        assert {o[0] for o in outcomes} <= {200, "not taken"}, seen
        assert all(o[1] > stopping - 0.5 for o in outcomes if o[0] == "not taken"), seen
        assert any(o[0] == 200 and o[1] < stopping < o[2] for o in outcomes), (
            "no request was in flight when SIGTERM came",
            seen,
        )
        assert [pid for pid in children if _alive(pid)] == [], "children outlived the stack"
    finally:
        if stack.poll() is None:
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait()


def _traffic_during(action: Callable[[], None], url: str) -> tuple[list[tuple[object, float, float]], float]:
    """Four clients sending slow requests (a batch of 8 states: about a second each, as
    `default` reads a noul question in ~0.1 s) before and after ``action``: (status or "not
    taken", when it was sent, when it ended) for each, and when ``action`` ran."""
    batch = {"requests": {f"r{i}": {**SEED_002_CURL, "state": f"{SEED_002_CURL['state']} ({i})"} for i in range(8)}}
    outcomes: list[tuple[object, float, float]] = []
    done = threading.Event()
    assert _get(url, batch)[0] == 200  # warm: a model's first pass of a new size is slow

    def client() -> None:
        while not done.is_set():
            sent = time.monotonic()
            try:
                status: object = _get(url, batch)[0]
            except (urllib.error.URLError, ConnectionError):
                # Refused, or reset from the accept queue of a listener closing: never read.
                status = "not taken"
                done.wait(0.05)
            outcomes.append((status, sent, time.monotonic()))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    stopping = time.monotonic()
    action()
    time.sleep(3)
    done.set()
    for t in threads:
        t.join(60)
    return outcomes, stopping


def child_environ(supervisor: int, program: str) -> dict[str, str]:
    """The environment of the stack's child running ``program`` (this user may read it)."""
    for pid in subprocess.run(["pgrep", "-P", str(supervisor)], capture_output=True, text=True).stdout.split():
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if any(Path(part.decode()).name == program for part in command):
            pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)
    raise AssertionError(f"no child of {supervisor} runs {program}")


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
        taken.listen()
        run = subprocess.run(
            [str(BIN / "vllm-sr"), "serve", "--port-offset", str(offset), "--state-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode == 1
    assert (
        f"port {Ports().shifted(offset).runtime} for the runtime is taken by pid {os.getpid()}" in run.stderr
        and "Traceback" not in run.stderr
    )
