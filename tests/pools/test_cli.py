"""``vllm-sr xds serve --kubeconfig``: discovery as a user turns it on, and refused as a user gets it wrong."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import BIN
from tests.e2e.envoy_proc import free_port, wait_for
from tests.extproc.harness import get_json
from tests.pools.apiserver import FakeApiServer, endpoint_slice

CONFIG = """version: 2
deployments:
  rt: {provider: systemone, service: {name: rt, port: 8100}, model: d3, schema: vllm-sr/5.0}
listeners:
  - {name: public, address: 127.0.0.1, port: 8801, apis: {systemone: {models: [d3]}}}
"""


def test_a_kubeconfig_turns_discovery_on_in_its_contexts_namespace(tmp_path: Path) -> None:
    api = FakeApiServer()
    api.put("ml", endpoint_slice("rt-1", "rt", [("10.0.0.1", True), ("10.0.0.2", False)], port=8100))
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    status_port = free_port()
    plane = subprocess.Popen(
        [
            str(BIN / "vllm-sr"),
            "xds",
            "serve",
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--status-port",
            str(status_port),
            "--kubeconfig",
            str(api.kubeconfig(tmp_path, "ml")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        status = wait_for(
            lambda: get_json(f"http://127.0.0.1:{status_port}/status")[1], timeout=30, what="the status port"
        )
        assert status["discovery"]["mode"] == "kubernetes" and status["discovery"]["namespace"] == "ml"
        assert status["discovery"]["deployments"]["rt"] == {
            "service": "ml/rt",
            "listed": True,
            "hosts": ["10.0.0.1:8100"],
        }
        assert status["resources"]["endpoints"] == 1
    finally:
        plane.terminate()
        plane.wait(10)
        api.stop()


def test_a_kubeconfig_that_cannot_be_used_exits_2_naming_it(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    broken = tmp_path / "kubeconfig"
    broken.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "clusters": []}))
    result = cli(
        "xds", "serve", "--config", str(config), "--port", "0", "--status-port", "0", "--kubeconfig", str(broken)
    )
    assert result.returncode == 2
    assert f"error: cannot use kubeconfig {broken}:" in result.stderr
    assert "Traceback" not in result.stderr
