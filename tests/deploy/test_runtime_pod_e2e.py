"""A runtime pod's container as the chart runs it, on this machine: the rendered command line and
environment, as a user that owns nothing but the pod's emptyDirs. In the pod the root filesystem
is read-only; here the user (nobody) can write nowhere but those folders and /tmp, which the pod
also has (an emptyDir), so a write anywhere else (its home, the packages) fails as it would
there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart import container, find
from tests.e2e.envoy_proc import free_port, wait_for
from tests.extproc.harness import BIN, get_status

pytestmark = [pytest.mark.slow]
NOBODY = 65534
SETPRIV = shutil.which("setpriv")


@pytest.mark.skipif(os.geteuid() != 0 or SETPRIV is None, reason="switching to another user needs root and setpriv")
def test_the_runtime_serves_writing_only_to_its_emptydirs(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    as_nobody = [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    runtime = container(find(rendered["default"], "Deployment", "runtime"), "runtime")
    command = str(BIN / runtime["command"][0])
    # A checkout under a private folder (mktemp -d is 0700) is not nobody's to read.
    probe = subprocess.run([*as_nobody, command, "--help"], capture_output=True, cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot run {command} (a folder above it is private to its owner)")
    # The /cache emptyDir, where nobody can reach it (pytest's tmp_path is root's alone).
    cache = Path(tempfile.mkdtemp(prefix="vsr-cache-"))
    os.chown(cache, NOBODY, NOBODY)
    os.chmod(cache, 0o755)
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"}
    for var in runtime["env"]:
        if "value" in var:
            env[var["name"]] = var["value"].replace("/cache", str(cache))
        else:  # OMP_NUM_THREADS: the downward API's requests.cpu, rounded up
            assert var["valueFrom"]["resourceFieldRef"]["resource"] == "requests.cpu"
            env[var["name"]] = "1"
    port = free_port()
    args = runtime["args"]
    args = [*args[: args.index("--port") + 1], str(port), *args[args.index("--port") + 2 :]]
    argv = [*as_nobody, command, *args]
    log = (tmp_path / "runtime.log").open("wb")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd="/")
    try:
        # Until it answers ready, or says it cannot load (wait_for would poll through that).
        wait_for(
            lambda: loaded(proc, port, tmp_path / "runtime.log") is not None,
            timeout=180,
            what="the runtime to load or fail",
        )
        assert loaded(proc, port, tmp_path / "runtime.log"), (tmp_path / "runtime.log").read_text()[-2000:]
        ask = {
            "model": "default",
            "state": "The export button fails with a 500 since this morning.",
            "questions": {"urgent": {"type": "noul", "instructions": "Is it urgent?"}},
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/systemone",
            json.dumps(ask).encode(),
            {"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert "urgent" in json.loads(reply.read())["answers"]
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        shutil.rmtree(cache, ignore_errors=True)


def loaded(proc: subprocess.Popen[bytes], port: int, log: Path) -> bool | None:
    """True once /health answers 200, False when the runtime exited or failed to load, else None."""
    if proc.poll() is not None or "model failed to load" in log.read_text():
        return False
    return True if get_status(f"http://127.0.0.1:{port}/health", timeout=2) == 200 else None
