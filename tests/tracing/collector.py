"""An OTLP/gRPC trace collector in the test process: what Envoy, the sidecar and the runtime
export, kept as plain spans for the tests to read."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a trace's root
    kind: int
    attributes: dict[str, Any] = field(default_factory=dict)


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """Listens on 127.0.0.1 (``endpoint``) until ``stop()``."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._changed = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"127.0.0.1:{port}"
        self._server.start()

    def Export(  # noqa: N802 - the service's name
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        got = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    got.append(
                        Span(
                            service=str(resource.get("service.name", "")),
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                        )
                    )
        with self._changed:
            self.spans += got
            self._changed.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait(self, until: Callable[[list[Span]], bool], timeout: float = 30) -> list[Span]:
        """The spans received so far, once ``until`` holds of them (an export wakes the check)."""
        with self._changed:
            if not self._changed.wait_for(lambda: until(list(self.spans)), timeout):
                seen = sorted({(s.service, s.name) for s in self.spans})
                raise AssertionError(f"the collector did not get the spans in {timeout} s; it has {seen}")
            return list(self.spans)

    def stop(self) -> None:
        self._server.stop(grace=None)


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None
