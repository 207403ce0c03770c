"""The operator commands against `vllm-sr serve` itself: status in step, versions under its state directory."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from sr_control.stack import Ports
from tests.conftest import ROOT, run_cli
from tests.e2e.envoy_proc import wait_for
from tests.stack.test_serve_stack import _free_offset, start_stack

pytestmark = [pytest.mark.envoy, pytest.mark.slow]


def test_status_versions_and_request_against_vllm_sr_serve(tmp_path: Path) -> None:
    offset = _free_offset()
    ports = Ports().shifted(offset)
    state = tmp_path / "state"
    stack = start_stack(["--port-offset", str(offset), "--state-dir", str(state)], tmp_path / "out.txt")
    try:
        where = ["--xds", f"127.0.0.1:{ports.xds_status}"]
        status = run_cli("status", *where, "--format", "json")
        report = json.loads(status.stdout)
        assert status.returncode == 0, report["problems"]
        assert sorted(n["kind"] for n in report["nodes"]) == ["envoy", "sidecar"]
        # The sidecar's status port, found from the control plane's nodes alone.
        assert [s["address"] for s in report["sidecars"] if s["reachable"]] == [f"127.0.0.1:{ports.sidecar_status}"]
        assert report["control_plane"]["config"] == str(state / "config.yaml")

        versions = json.loads(run_cli("config", "versions", "--xds", where[1], "--format", "json").stdout)
        assert [e["version"] for e in versions["versions"]] == [report["control_plane"]["version"]]
        assert (state / "versions" / f"{versions['live']}.yaml").read_text() == (state / "config.yaml").read_text()

        seed = ROOT / "examples" / "requests" / "seed-002-curl.json"
        answered = run_cli("request", "-l", f"http://127.0.0.1:{ports.listener}", str(seed), "--xds", where[1])
        assert answered.returncode == 0 and "urgent (noul): noul=" in answered.stdout
        assert f"config version    {report['control_plane']['version']}  (live" in answered.stdout
        # The request, found by its id in the stack's logs (Envoy's access log line).
        request_id = answered.stdout.split("request id", 1)[1].split()[0]

        def logged() -> str:
            done = run_cli("logs", "--state-dir", str(state), "--request-id", request_id)
            return done.stdout if done.returncode == 0 else ""

        line = wait_for(logged, timeout=20, what="the request's access log line")
        assert line.startswith("envoy ") and '"path":"/v1/systemone"' in line.replace(" ", "")
    finally:
        os.killpg(stack.pid, signal.SIGTERM)
        stack.wait(timeout=60)
