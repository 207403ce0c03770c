"""``vllm-sr extproc serve --workers 2`` under the shared supervisor, as an operator sees it:
Ctrl-C stops it with 0, a worker that dies stops the rest with 1 and one log line. No control
plane answers (the workers run all the same, waiting for one)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.envoy_proc import free_port
from tests.extproc.harness import VLLM_SR


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _workers(proc: subprocess.Popen[str]) -> list[int]:
    deadline = time.monotonic() + 60
    while True:
        workers = [p for p in _children(proc.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
        if len(workers) == 2:
            return workers
        assert time.monotonic() < deadline and proc.poll() is None, "the workers never started"
        time.sleep(0.1)


def _sidecar() -> subprocess.Popen[str]:
    args = ["--xds", "127.0.0.1:1", "--port", str(free_port()), "--status-port", str(free_port()), "--workers", "2"]
    return subprocess.Popen([VLLM_SR, "extproc", "serve", *args], stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_ctrl_c_stops_the_sidecar_and_its_workers_with_0() -> None:
    proc = _sidecar()
    workers = _workers(proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert all(not Path(f"/proc/{p}").exists() for p in workers)


@pytest.mark.slow
def test_a_dead_worker_stops_the_sidecar_with_1_and_says_so() -> None:
    proc = _sidecar()
    first, second = _workers(proc)
    os.kill(first, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "extproc worker died" in stderr and f"-{signal.SIGKILL.value}" in stderr
    assert not Path(f"/proc/{second}").exists()
