"""Restarting `vllm-sr serve` as a user does: Ctrl-C, then `make serve` again at once, with an
edited config. Issue 22's rows: a port in TIME-WAIT refused a restart for a minute, an edited
`.vllm-sr/config.yaml` was overwritten by the embedded default, and Ctrl-C with a long request
in flight took 24 s."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sr_control.stack import STOP_GRACE, Ports, Stack, StackError, StackOptions, _free, default_config
from tests.conftest import ROOT
from tests.stack.test_serve_stack import SEED_002_CURL, _free_offset, _get, start_stack


def _time_wait_port() -> int:
    """A port with a connection in TIME-WAIT on it and nothing listening: the side that closes
    first (here the server, as a stopping server does) keeps TIME-WAIT for about a minute. The
    server sets SO_REUSEADDR, as uvicorn, grpcio and Envoy do (Linux lets a port in TIME-WAIT
    be bound again only when both sockets set it)."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()
        client.recv(1)  # the server's FIN has arrived
        client.close()
    return port


def _states(port: int) -> set[str]:
    """TCP states of sockets on ``port`` (/proc/net/tcp: 06 is TIME-WAIT, 0A is LISTEN)."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return {cols[3] for cols in (line.split() for line in lines) if int(cols[1].rsplit(":", 1)[1], 16) == port}


def test_a_port_in_time_wait_is_free_to_a_restarted_stack() -> None:
    port = _time_wait_port()
    assert "06" in _states(port) and "0A" not in _states(port)  # what a stack stopped a moment ago leaves
    _free("runtime", port)  # no StackError


def test_a_port_something_listens_on_is_refused_naming_the_process() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StackError) as refused:
            _free("runtime", port)
    message = str(refused.value)
    assert f"port {port} for the runtime is taken by pid {os.getpid()} (" in message and "--port-offset" in message


def _placed(state: Path, ports: Ports, **options: object) -> str:
    stack = Stack(StackOptions(state_dir=state, ports=ports, **options))  # type: ignore[arg-type]
    state.mkdir(exist_ok=True)
    stack._place_config()
    return stack.config_path.read_text()


def test_an_edited_served_config_is_kept_across_restarts_and_reset_on_request(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert _placed(state, Ports()) == default_config(Ports())  # first start: the embedded default
    edited = default_config(Ports()).replace("max_deadline_ms: 10000", "max_deadline_ms: 4000")
    (state / "config.yaml").write_text(edited)
    assert _placed(state, Ports()) == edited  # the user's edit survives a restart
    assert _placed(state, Ports().shifted(10)) == edited  # whatever the ports
    assert _placed(state, Ports(), reset_config=True) == default_config(Ports())  # --reset-config


def test_an_unedited_default_follows_a_new_port_offset(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _placed(state, Ports())
    assert _placed(state, Ports().shifted(10)) == default_config(Ports().shifted(10))


def test_a_given_config_is_served_as_given(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(default_config(Ports().shifted(20)))
    assert _placed(tmp_path / "state", Ports(), config=mine) == mine.read_text()


@pytest.mark.slow
def test_ctrl_c_with_a_long_request_in_flight_then_a_restart_at_once_keeps_the_edit(tmp_path: Path) -> None:
    offset = _free_offset()
    ports = Ports().shifted(offset)
    state = tmp_path / "state"
    drain_s = 1.0
    args = ["--port-offset", str(offset), "--state-dir", str(state), "--drain-s", str(drain_s)]

    def start(log: Path) -> subprocess.Popen[bytes]:
        return start_stack(args, log, timeout_s=240)

    stack = start(tmp_path / "first.txt")
    try:
        # An edit to the served copy (a listener deadline), live at once and kept below.
        config = state / "config.yaml"
        edited = config.read_text().replace("max_deadline_ms: 10000", "max_deadline_ms: 9000")
        assert edited != config.read_text()
        config.write_text(edited)

        # A request that takes far longer than the drain bound: a batch of 120 states.
        batch = {
            "requests": {f"r{i}": {**SEED_002_CURL, "state": f"{SEED_002_CURL['state']} ({i})"} for i in range(120)}
        }
        started = threading.Event()

        def long_request() -> None:
            started.set()
            try:
                _get(f"http://127.0.0.1:{ports.listener}/v1/systemone/batch", batch)
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass  # cut off by the stop: what the client sees is not this test's subject

        thread = threading.Thread(target=long_request, daemon=True)
        thread.start()
        started.wait()
        time.sleep(1.0)  # in the runtime now
        stack.send_signal(signal.SIGINT)
        stopping = time.monotonic()
        code = stack.wait(timeout=60)
        took = time.monotonic() - stopping
        # The stop's contract (the drain bound plus STOP_GRACE), with 1 s for process exits on a busy machine.
        assert code == 0 and took <= drain_s + STOP_GRACE + 1.0, (
            code,
            took,
            (tmp_path / "first.txt").read_text()[-2000:],
        )

        time.sleep(1.0)
        stack = start(tmp_path / "second.txt")  # ports in TIME-WAIT do not refuse it
        assert config.read_text() == edited
        status, answer = _get(f"http://127.0.0.1:{ports.listener}/v1/systemone", SEED_002_CURL)
        assert status == 200 and answer["answers"]["urgent"]["type"] == "noul"
    finally:
        if stack.poll() is None:
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait()


def test_make_serve_passes_config_and_args_to_vllm_sr_serve() -> None:
    # `make -n` prints what `make serve` would run, running nothing. Under `make test` the parent
    # make's variables would make this one a sub-make that prints "Entering directory" lines.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    run = subprocess.run(
        ["make", "-n", "serve", "CONFIG=my.yaml", "ARGS=--reset-config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == ".venv/bin/vllm-sr serve --config my.yaml --reset-config"
    plain = subprocess.run(["make", "-n", "serve"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert plain.stdout.strip().splitlines()[-1].split() == [".venv/bin/vllm-sr", "serve"]


def test_the_sidecars_port_check_for_its_workers_tolerates_time_wait_too() -> None:
    from sr_control.extproc.server import _check_port_free

    _check_port_free("127.0.0.1", _time_wait_port())  # a sidecar stopped a moment ago: free
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="cannot listen"):
            _check_port_free("127.0.0.1", taken.getsockname()[1])
