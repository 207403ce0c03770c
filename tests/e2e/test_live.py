"""A real Envoy that knows only the control plane (``bootstrap.yaml``), and ``vllm-sr xds serve``.

Every change is an edit of the config file; each must take effect in the running Envoy (same
process, restart epoch 0) or, when invalid, change nothing and be reported. Run once over
state-of-the-world ADS and once over delta.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from envoy.service.discovery.v3 import discovery_pb2

from sr_control.compiler import Address, Resources, Settings, compile
from sr_control.compiler.protos import CLUSTER, LISTENER, ROUTE, TYPE_NAMES
from sr_control.config.load import load_text
from tests.e2e.envoy_proc import Envoy, free_port, wait_for
from tests.e2e.http_client import Reply, request
from tests.e2e.upstreams import ExtProcServer, Upstream

pytestmark = pytest.mark.envoy
VLLM_SR = str(Path(sys.executable).parent / "vllm-sr")  # the console script, as an operator runs it


@dataclass
class Stack:
    """Envoy, the control plane process and the config file they share."""

    directory: Path
    config: Path
    ports: dict[str, int]
    llm: Upstream
    decisions: Upstream
    sidecar: ExtProcServer
    envoy: Envoy | None = None
    xds: subprocess.Popen[bytes] | None = None

    def render(
        self,
        *,
        schema: str = "vllm-sr/5.0",
        chat: bool = True,
        deadline_ms: int = 3000,
        internal: bool = False,
        extra: str = "",
    ) -> str:
        p = self.ports
        text = f"""version: 2
providers:
  models:
    - {{name: llm-a, api_format: chat_completions, endpoints: ["{self.llm.url}/v1"]}}
deployments:
  local-d3: {{provider: systemone, endpoint: "{self.decisions.url}/v1/systemone", model: d3, schema: vllm-sr/5.0}}
listeners:
  - name: public
    address: 127.0.0.1
    port: {p["public"]}
    apis:
      systemone: {{schema: {schema}, max_deadline_ms: {deadline_ms}}}
"""
        if chat:
            text += "      chat_completions: {models: [llm-a]}\n"
        if internal:
            text += (
                f"  - {{name: internal, address: 127.0.0.1, port: {p['internal']}, apis: {{chat_completions: "
                f"{{models: [llm-a]}}}}}}\n"
            )
        return text + extra

    def write(self, text: str) -> None:
        # As editors do: a new file renamed over the old one.
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config)

    def start_xds(self) -> None:
        p = self.ports
        args = [
            "xds",
            "serve",
            "--config",
            str(self.config),
            "--host",
            "127.0.0.1",
            "--port",
            str(p["xds"]),
            "--status-port",
            str(p["status"]),
        ]
        args += ["--sidecar", f"127.0.0.1:{self.sidecar.port}", "--poll-interval", "0.01"]
        log = open(self.directory / "xds.log", "ab")
        self.xds = subprocess.Popen([VLLM_SR, *args], stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.status()["version"], timeout=30, what="the control plane to serve")

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['status']}/status", timeout=5) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    def xds_log(self) -> str:
        return (self.directory / "xds.log").read_text()

    def post(self, path: str, body: bytes = b"{}", port: str = "public", **headers: str) -> Reply:
        return request(self.ports[port], "POST", path, body, headers)

    def apply(self, text: str) -> None:
        """Write ``text`` and wait until Envoy has ACKed every type of the version it compiles to."""
        self.write(text)
        expected = compile(load_text(text), Settings(sidecar=Address("127.0.0.1", self.sidecar.port)))
        wait_for(lambda: self.in_sync(expected), what="Envoy to ACK the edit")

    def in_sync(self, expected: Resources) -> bool:
        nodes = [n for n in self.status()["nodes"] if n["id"] == "vllm-sr-envoy"]
        if not nodes:
            return False
        acked = {name: t["acked"] for name, t in nodes[0]["types"].items()}
        return all(acked.get(TYPE_NAMES[t]) == expected.type_version(t) for t in (CLUSTER, LISTENER, ROUTE))


@pytest.fixture(scope="module", params=["sotw", "delta"])
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    llm: Upstream,
    decisions: Upstream,
    sidecar: ExtProcServer,
) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp(f"live-{request.param}")
    ports = {name: free_port() for name in ("public", "internal", "admin", "xds", "status")}
    s = Stack(directory, directory / "config.yaml", ports, llm, decisions, sidecar)
    s.write(s.render())
    compiled = subprocess.run(
        [
            VLLM_SR,
            "config",
            "compile",
            str(s.config),
            "-o",
            str(directory / "out"),
            "--ads",
            request.param,
            "--xds",
            f"127.0.0.1:{ports['xds']}",
            "--admin",
            f"127.0.0.1:{ports['admin']}",
            "--sidecar",
            f"127.0.0.1:{sidecar.port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert compiled.returncode == 0, compiled.stderr
    s.start_xds()
    s.envoy = Envoy(directory / "out" / "bootstrap.yaml", ports["admin"], directory / "envoy.log")
    s.apply(s.render())
    yield s
    if s.xds is not None and s.xds.poll() is None:
        s.xds.send_signal(signal.SIGTERM)
        s.xds.wait(10)
    s.envoy.stop()


def same_envoy(stack: Stack, pid: int) -> None:
    assert stack.envoy is not None
    info = stack.envoy.server_info()
    assert stack.envoy.proc.pid == pid and stack.envoy.proc.poll() is None
    assert info["command_line_options"]["restart_epoch"] == 0
    assert info["state"] == "LIVE"


def test_the_served_config_routes_traffic(stack: Stack) -> None:
    seen = stack.post("/v1/systemone").json()
    assert seen["metadata"]["x-vsr-listener"] == "public"
    assert stack.post("/v1/chat/completions").json()["upstream"] == "llm"


def test_adding_a_listener_takes_effect_without_a_restart(stack: Stack) -> None:
    pid = stack.envoy.proc.pid  # type: ignore[union-attr]
    stack.apply(stack.render(internal=True))
    assert stack.post("/v1/chat/completions", port="internal").json()["upstream"] == "llm"
    same_envoy(stack, pid)
    stack.apply(stack.render())  # removed again: Envoy drains it (--drain-time-s) and closes the port


def test_removing_an_api_makes_its_paths_404_naming_the_listener(stack: Stack) -> None:
    pid = stack.envoy.proc.pid  # type: ignore[union-attr]
    stack.apply(stack.render(chat=False))
    reply = stack.post("/v1/chat/completions")
    assert reply.status == 404
    message = reply.json()["detail"]["message"]
    assert "chat_completions" in message and "'public'" in message
    same_envoy(stack, pid)
    stack.apply(stack.render())
    assert stack.post("/v1/chat/completions").status == 200


def test_changing_a_listener_schema_takes_effect_without_a_restart(stack: Stack) -> None:
    pid = stack.envoy.proc.pid  # type: ignore[union-attr]
    stack.apply(stack.render(schema="vllm-sr/4.0"))
    assert stack.post("/v1/systemone").json()["metadata"]["x-vsr-schema"] == "vllm-sr/4.0"
    same_envoy(stack, pid)
    stack.apply(stack.render())
    assert stack.post("/v1/systemone").json()["metadata"]["x-vsr-schema"] == "vllm-sr/5.0"


def test_the_sidecar_can_fetch_the_data_of_the_version_envoy_routed_with(stack: Stack) -> None:
    import grpc
    from envoy.service.discovery.v3 import ads_pb2_grpc

    version = stack.post("/v1/systemone").json()["metadata"]["x-vsr-config-version"]
    channel = grpc.insecure_channel(f"127.0.0.1:{stack.ports['xds']}")
    try:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        subscribe = discovery_pb2.DeltaDiscoveryRequest(
            type_url="type.googleapis.com/xds.type.v3.TypedStruct", resource_names_subscribe=["sidecar/public"]
        )
        subscribe.node.id = "sidecar-test"
        responses = stub.DeltaAggregatedResources(iter([subscribe]), timeout=10)
        first = next(responses)
        (resource,) = first.resources
        assert resource.name == "sidecar/public" and resource.version == version
        responses.cancel()
    finally:
        channel.close()


def test_an_in_flight_request_survives_a_change_of_its_listener(stack: Stack) -> None:
    settings = Settings(sidecar=Address("127.0.0.1", stack.sidecar.port))
    before, after = (compile(load_text(stack.render(deadline_ms=ms)), settings) for ms in (3000, 4500))
    assert before.named(LISTENER)["listener/public"].version != after.named(LISTENER)["listener/public"].version
    result: dict[str, Reply] = {}
    slow = threading.Thread(
        target=lambda: result.setdefault("reply", stack.post("/v1/chat/completions", **{"x-test-delay-ms": "1500"}))
    )
    slow.start()
    # A new deadline changes the Listener itself (its ext_proc message timeout, as checked
    # above), not only its routes: Envoy replaces the listener and drains the old one.
    stack.apply(stack.render(deadline_ms=4500))
    assert slow.is_alive(), "the slow request finished before the change: the test proved nothing"
    slow.join(30)
    assert result["reply"].status == 200
    assert result["reply"].json()["upstream"] == "llm"
    stack.apply(stack.render())


def test_an_invalid_edit_changes_nothing_and_is_reported(stack: Stack) -> None:
    before = stack.status()
    stack.write(stack.render(schema="vllm-sr/9.9"))
    error = wait_for(
        lambda: (e := stack.status()["last_error"]) and e["at"] != (before["last_error"] or {}).get("at") and e
    )
    (problem,) = error["problems"]
    assert problem["field"] == "listeners[0].apis.systemone.schema"
    assert problem["line"] == 12
    assert "vllm-sr/9.9" in problem["message"]
    assert "config rejected" in stack.xds_log() and "listeners[0].apis.systemone.schema" in stack.xds_log()
    after = stack.status()
    assert after["version"] == before["version"]
    assert after["nodes"][0]["types"] == before["nodes"][0]["types"]
    assert stack.post("/v1/systemone").json()["metadata"]["x-vsr-schema"] == "vllm-sr/5.0"
    stack.apply(stack.render())


def test_a_config_envoy_refuses_is_logged_with_envoys_message(stack: Stack) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        clash = (
            f"  - {{name: clash, address: 127.0.0.1, port: {port}, apis: {{chat_completions: {{models: [llm-a]}}}}}}\n"
        )
        stack.write(stack.render(extra=clash))
        nack = wait_for(lambda: stack.status()["nodes"][0]["types"]["listeners"]["nack"], what="Envoy's NACK")
        # Valid and published, but not live: the reload says so, with Envoy's own words (issue 22).
        last = stack.status()["last_reload"]
        assert last["result"] == "refused" and last["version"] == stack.status()["version"]
        assert [(r["node"], r["type"]) for r in last["refused_by"]] == [("vllm-sr-envoy", "listeners")]
        assert "address already in use" in last["refused_by"][0]["message"].lower()
    assert "address already in use" in nack["message"].lower()
    assert "envoy rejected config" in stack.xds_log()
    assert stack.post("/v1/systemone").status == 200  # the previous listeners keep serving
    # Reverted: the status comes to say all is well, the reload ok and every type pushed == acked
    # with no NACK standing, once Envoy has answered the revert (on a busy machine the reload's
    # result can be read a moment before Envoy's ACK clears the NACK).
    stack.apply(stack.render())

    def converged() -> dict | None:  # type: ignore[type-arg]
        status = stack.status()
        types = status["nodes"][0]["types"].values()
        ok = status["last_reload"]["result"] == "ok" and all(
            t["pushed"] == t["acked"] and t["nack"] is None for t in types
        )
        return status if ok else None

    status = wait_for(converged, what="the reload ok and every type pushed == acked, no NACK standing")
    assert status["last_reload"]["result"] == "ok"


def test_killing_and_restarting_the_control_plane_leaves_traffic_flowing_and_envoy_resynced(stack: Stack) -> None:
    pid = stack.envoy.proc.pid  # type: ignore[union-attr]
    assert stack.xds is not None
    stack.xds.kill()
    stack.xds.wait()
    assert stack.post("/v1/systemone").status == 200
    assert stack.post("/v1/chat/completions").json()["upstream"] == "llm"
    stack.write(stack.render(schema="vllm-sr/4.0"))  # edited while the control plane is down
    stack.start_xds()
    wait_for(
        lambda: stack.post("/v1/systemone").json()["metadata"]["x-vsr-schema"] == "vllm-sr/4.0",
        timeout=30,
        what="Envoy to resync",
    )
    stack.apply(stack.render(schema="vllm-sr/4.0"))  # and the status shows the node in sync
    same_envoy(stack, pid)
    stack.apply(stack.render())


def test_no_deprecated_feature_was_used(stack: Stack) -> None:
    assert stack.envoy is not None
    assert stack.envoy.stat("runtime.deprecated_feature_use") == 0
    assert (
        stack.envoy.stat("listener_manager.lds.update_rejected") >= 1
    )  # the NACK test's refusal, and only Envoy saw it
