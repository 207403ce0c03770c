"""One trace per request across Envoy, the sidecar and the runtime, joined by the request id.

A real Envoy fed by the control plane, a real ``vllm-sr extproc serve`` and a real ``vllm-srun
serve`` on the tiny checkpoint, with ``tracing`` in the config pointing at a collector in this
process (collector.py). The runtime learns the collector from OTEL_EXPORTER_OTLP_ENDPOINT, as
any OpenTelemetry program does. Each part exports in batches; the tests shorten the batch delay
(OTEL_BSP_SCHEDULE_DELAY for ours, Envoy's runtime keys for Envoy's) and wait for the spans.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from sr_control.compiler import compile
from sr_control.compiler.protos import CLUSTER, LISTENER, SIDECAR, TYPE_NAMES
from sr_control.config.load import load_text
from sr_runtime.presets import create
from tests.e2e.envoy_proc import Envoy, free_port, wait_for
from tests.e2e.http_client import Reply
from tests.e2e.http_client import request as http_request
from tests.extproc.harness import Plane, Runtime, SidecarProc, envoy_for, get_json
from tests.tracing.collector import Collector, Span

pytestmark = pytest.mark.envoy

SERVER, CLIENT = 2, 3  # OTLP's SpanKind values
REQUEST_ID = "guid:x-request-id"
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "50"}
CONFIG = """\
version: 2
deployments:
  full: {{provider: systemone, endpoint: "{runtime}/v1/systemone", model: tiny, schema: vllm-sr/5.0}}
pools:
  vllm-sr/auto: {{members: [full]}}
listeners:
  - name: public
    address: 127.0.0.1
    port: {port}
    apis:
      systemone: {{models: [vllm-sr/auto], max_deadline_ms: 20000}}
tracing: {{otlp_endpoint: "{collector}"}}
"""
BODY = {
    "model": "vllm-sr/auto",
    "state": "Our export button fails with a 500 since this morning. Open a ticket.",
    "questions": {"blocked": {"type": "noul", "instructions": "Does the user report a problem that blocks work?"}},
}


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    found = Collector()
    try:
        yield found
    finally:
        found.stop()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create(tmp_path_factory.mktemp("traced-checkpoint") / "tiny", "llama-prefix-bidir", seed=0)


def traced_runtime(checkpoint: Path, log: Path, collector: Collector, **env: str) -> Runtime:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{collector.endpoint}", **env}
    with mock.patch.dict(os.environ, env):  # Runtime passes the test's environment on
        return Runtime(checkpoint, log).start()


@pytest.fixture(scope="module")
def runtime(checkpoint: Path, collector: Collector, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    runtime = traced_runtime(
        checkpoint, tmp_path_factory.mktemp("traced-runtime") / "runtime.log", collector, **FAST_EXPORT
    )
    try:
        yield runtime.wait()
    finally:
        runtime.stop()


@dataclass
class Stack:
    port: int
    forwarding: str  # who calls the runtime: the sidecar, or Envoy
    plane: Plane

    def post(self, body: Any, path: str = "/v1/systemone") -> Reply:
        return http_request(self.port, "POST", path, json.dumps(body).encode(), {"content-type": "application/json"})

    def apply(self, text: str) -> None:
        """Edit the config; return once Envoy and the sidecar have both ACKed what it compiles to."""
        self.plane.write(text)
        expected = compile(load_text(text), self.plane.settings)

        def synced() -> bool:
            acked: dict[str, set[str]] = {}
            for node in get_json(self.plane.status_url)[1]["nodes"]:
                for name, t in node["types"].items():
                    acked.setdefault(name, set()).add(t.get("acked") or "")
            return all(acked.get(TYPE_NAMES[t]) == {expected.type_version(t)} for t in (CLUSTER, LISTENER, SIDECAR))

        wait_for(synced, timeout=30, what="Envoy and the sidecar to ACK the edit")


@contextmanager
def running(directory: Path, runtime: Runtime, collector: Collector, forwarding: str, traced: bool) -> Iterator[Stack]:
    """Envoy and a sidecar before ``runtime``, fed by a control plane in this process."""
    port, sidecar_port = free_port(), free_port()
    text = CONFIG.format(runtime=runtime.url, port=port, collector=collector.endpoint)
    parts: list[Any] = []
    try:
        plane = Plane(directory, text if traced else untraced(text), sidecar_port)
        parts.append(plane)
        args = ("--forwarding", forwarding)
        parts.append(SidecarProc(directory, plane.port, port=sidecar_port, env=FAST_EXPORT, args=args).wait())
        envoy = envoy_for(directory, plane, sidecar_port)
        parts.append(envoy)
        # Envoy exports every 5 s, or once 5 spans wait: at once here.
        _post_admin(envoy, "/runtime_modify?tracing.opentelemetry.min_flush_spans=1")
        wait_for(lambda: _answers(port), timeout=60, what="the listener to answer")
        yield Stack(port, forwarding, plane)
    finally:
        for part in reversed(parts):
            part.stop()


def untraced(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("tracing:"))


@pytest.fixture(scope="module", params=["sidecar", "envoy"])
def stack(
    request: pytest.FixtureRequest, collector: Collector, runtime: Runtime, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """``sidecar``: the sidecar calls the runtime itself; ``envoy``: Envoy forwards to it."""
    directory = tmp_path_factory.mktemp(f"traced-{request.param}")
    with running(directory, runtime, collector, request.param, traced=True) as found:
        yield found


def test_one_trace_spans_envoy_the_sidecar_and_the_runtime(stack: Stack, collector: Collector) -> None:
    # A key in the query (some clients send one so) reaches no span.
    reply = stack.post(BODY, "/v1/systemone?api_key=not-for-any-span")
    assert reply.status == 200, reply.body
    request_id = reply.headers["x-request-id"]

    def whole(spans: list[Span]) -> bool:
        services = {s.service for s in spans if s.attributes.get(REQUEST_ID) == request_id}
        return services == {"vllm-sr-envoy", "vllm-sr-sidecar", "vllm-sr-runtime"}

    tagged = [s for s in collector.wait(whole) if s.attributes.get(REQUEST_ID) == request_id]
    traces = {s.trace_id for s in tagged}
    assert len(traces) == 1, tagged
    trace = [s for s in collector.wait(lambda spans: _trace_complete(spans, traces)) if s.trace_id in traces]
    by_id = {s.span_id: s for s in trace}

    def parent(span: Span) -> Span:
        return by_id[span.parent_id]

    # Envoy's span for the request is the root, and every other span descends from it.
    (root,) = [s for s in trace if not s.parent_id]
    assert root.service == "vllm-sr-envoy" and root.kind == SERVER
    for span in trace:
        chain = [span]
        while chain[-1].parent_id:
            chain.append(parent(chain[-1]))
        assert chain[-1] is root, chain
    # The sidecar's span is a child of Envoy's ext_proc call.
    (sidecar,) = [s for s in trace if s.service == "vllm-sr-sidecar" and s.kind == SERVER]
    assert parent(sidecar).service == "vllm-sr-envoy" and parent(sidecar).kind == CLIENT
    assert sidecar.attributes["vllm_sr.listener"] == "public"
    (choose,) = [s for s in trace if s.service == "vllm-sr-sidecar" and s.name == "choose"]
    assert choose.attributes["vllm_sr.model"] == "vllm-sr/auto" and choose.attributes["vllm_sr.capable"] == ["full"]
    assert "read" in {s.name for s in trace if s.parent_id == sidecar.span_id}
    # The runtime's span is a child of whoever called it: the sidecar's call, or Envoy's forward.
    (member,) = [s for s in trace if s.service == "vllm-sr-runtime" and s.kind == SERVER]
    assert member.name == "POST /v1/decisions"
    caller = parent(member)
    assert caller.service == f"vllm-sr-{stack.forwarding}" and caller.kind == CLIENT
    assert {"read", "model"} <= {s.name for s in trace if s.parent_id == member.span_id}
    assert not [s for s in trace if "not-for-any-span" in repr(s.attributes)]
    assert root.attributes["http.url"] == "/v1/systemone"
    # One request id on the spans of all three, as the client got it.
    assert {s.attributes[REQUEST_ID] for s in (root, sidecar, member)} == {request_id}


def test_an_edit_turns_tracing_on_in_envoy_and_the_sidecar_without_a_restart(
    collector: Collector, runtime: Runtime, tmp_path: Path
) -> None:
    with running(tmp_path, runtime, collector, "sidecar", traced=False) as stack:
        before = stack.post(BODY)
        assert before.status == 200
        stack.apply((tmp_path / "config.yaml").read_text() + f'tracing: {{otlp_endpoint: "{collector.endpoint}"}}\n')
        after = stack.post(BODY)
        assert after.status == 200

        def of(reply: Reply) -> Callable[[list[Span]], set[str]]:
            return lambda spans: {
                s.service for s in spans if s.attributes.get(REQUEST_ID) == reply.headers["x-request-id"]
            }

        spans = collector.wait(lambda spans: of(after)(spans) >= {"vllm-sr-envoy", "vllm-sr-sidecar"})
    # The runtime traced both (it was started tracing); Envoy and the sidecar only the one after the edit.
    assert of(before)(spans) <= {"vllm-sr-runtime"}


def test_a_runtime_called_directly_starts_a_trace_and_sends_it_when_it_stops(
    checkpoint: Path, collector: Collector, tmp_path: Path
) -> None:
    # Batches every 10 minutes: only the flush at stop can send the span in time.
    runtime = traced_runtime(checkpoint, tmp_path / "runtime.log", collector, OTEL_BSP_SCHEDULE_DELAY="600000")
    try:
        runtime.wait()
        port = int(runtime.url.rsplit(":", 1)[1])
        headers = {"content-type": "application/json", "x-request-id": "direct-1"}
        body = {**BODY, "model": "tiny"}
        reply = http_request(port, "POST", "/v1/systemone", json.dumps(body).encode(), headers)
        assert reply.status == 200, reply.body
    finally:
        runtime.stop()
    spans = collector.wait(lambda spans: any(s.attributes.get(REQUEST_ID) == "direct-1" for s in spans))
    (span,) = [s for s in spans if s.attributes.get(REQUEST_ID) == "direct-1"]
    assert (span.service, span.name, span.parent_id) == ("vllm-sr-runtime", "POST /v1/systemone", "")
    assert span.attributes["vllm_sr.model"] == "tiny"
    assert span.attributes["http.response.status_code"] == 200


def _trace_complete(spans: list[Span], traces: set[str]) -> bool:
    """Every span of the trace has arrived: each parent named is there."""
    trace = [s for s in spans if s.trace_id in traces]
    ids = {s.span_id for s in trace}
    return bool(trace) and all(not s.parent_id or s.parent_id in ids for s in trace)


def _answers(port: int) -> bool:
    try:
        return http_request(port, "GET", "/v1/models", None, {}).status == 200
    except OSError:
        return False


def _post_admin(envoy: Envoy, path: str) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{envoy.admin_port}{path}", method="POST")
    with urllib.request.urlopen(req, timeout=5) as reply:
        assert reply.status == 200
