"""OpenTelemetry spans of the server processes (the sidecar, the runtime), off until a config
names a collector.

    tracing = tracer_for(settings, "sidecar")       # None when settings is None: tracing off
    span = tracing.server_span("ext_proc", carrier, {REQUEST_ID: rid})   # child of the caller's
    with tracing.within(span):                      # current while the block runs
        with step("choose", model="tiny"):          # a child of the current span
            ...
        traced = outgoing("POST", url)              # a call we make: its span and traceparent
    span.end()

Envoy starts (or continues) each request's W3C trace and passes its ``traceparent`` on: to the
sidecar in the ext_proc call's metadata, to a member in the request's headers. The sidecar's
spans are children of Envoy's, and every call the sidecar makes carries its own span's
``traceparent``, so a runtime's span is a child of the sidecar's call: one trace per request.
Every span carries the request id as ``guid:x-request-id``, the tag Envoy puts on its own
spans, so one query finds a request's spans in every service.

Nothing of ``opentelemetry`` is imported until the first Tracing is made: with tracing off,
``step`` and ``outgoing`` cost one check of a module flag.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from opentelemetry.trace import Span

# Envoy's own tag for the request id on its spans; ours use the same key.
REQUEST_ID = "guid:x-request-id"
# The W3C trace context headers (and gRPC metadata keys) a caller may send.
TRACE_HEADERS = frozenset({"traceparent", "tracestate"})
_STATUS = "http.response.status_code"


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """Where spans go: the config's ``tracing`` block (sr_control/config/model.py ``Tracing``)."""

    otlp_endpoint: str  # HOST:PORT of an OTLP/gRPC collector, plaintext
    sample_rate: float = 100.0  # percent of the traces this process starts itself (no parent)
    service_name: str = "vllm-sr"  # the prefix: <service_name>-sidecar, <service_name>-runtime

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None) -> TracingSettings | None:
        if not doc:
            return None
        return cls(
            str(doc["otlp_endpoint"]), float(doc.get("sample_rate", 100.0)), str(doc.get("service_name", "vllm-sr"))
        )


class Tracing:
    """One process's tracer for one component, exporting in batches on a thread of its own."""

    def __init__(self, settings: TracingSettings, component: str) -> None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.settings = settings
        self.service = f"{settings.service_name}-{component}"
        # A request Envoy sampled is traced here too, one it did not is not: the trace is whole or
        # absent. Only a trace this process starts (a runtime called directly) is sampled here.
        self.provider = TracerProvider(
            resource=Resource.create({SERVICE_NAME: self.service}),
            sampler=ParentBased(TraceIdRatioBased(settings.sample_rate / 100)),
        )
        # http://: the exporter reads a bare host:port as a URL scheme; insecure: plaintext, as
        # Envoy's cluster to the same collector.
        exporter = OTLPSpanExporter(endpoint=f"http://{settings.otlp_endpoint}", insecure=True)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("vllm-sr")
        self._propagator = TraceContextTextMapPropagator()

    def server_span(self, name: str, carrier: Mapping[str, str], attributes: Mapping[str, Any]) -> Span:
        """A span for work a caller asked for, the child of the ``traceparent`` in ``carrier``
        (headers or gRPC metadata); not current until ``within``, ended by the caller."""
        from opentelemetry.trace import SpanKind

        parent = self._propagator.extract({k: v for k, v in carrier.items() if k in TRACE_HEADERS})
        return self.tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=dict(attributes))

    @contextmanager
    def within(self, span: Span) -> Iterator[Span]:
        """``span`` is the current one while the block runs: ``step`` and ``outgoing`` hang
        their spans under it."""
        from opentelemetry.trace import use_span

        token = _current.set(self)
        try:
            with use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield span
        finally:
            _current.reset(token)

    def headers_of(self, span: Span) -> list[tuple[str, str]]:
        """The ``traceparent`` (and ``tracestate``) that make a callee's span a child of ``span``."""
        from opentelemetry.trace import set_span_in_context

        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=set_span_in_context(span))
        return list(carrier.items())

    def shutdown(self) -> None:
        """Export what is buffered, then stop the exporting thread."""
        self.provider.shutdown()


def set_status(span: Span, status: int) -> None:
    """The HTTP status the work ended with; a 5xx marks the span failed."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute(_STATUS, status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR, f"answered {status}"))


def step(name: str, **attributes: Any) -> AbstractContextManager[Span | None]:
    """A child of the current span for one step of the work (read, choose, the model's pass);
    nothing at all when no traced request is current."""
    if not _on:
        return _OFF
    tracing = _current.get()
    if tracing is None:
        return _OFF
    return tracing.tracer.start_as_current_span(name, attributes=attributes)


@dataclass(slots=True)
class Outgoing:
    """A call this process makes while a traced request is current: its span, and the headers
    that make the callee's span its child."""

    span: Span
    headers: list[tuple[str, str]]

    def answered(self, status: int) -> None:
        set_status(self.span, status)

    def end(self, error: BaseException | None = None) -> None:
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        self.span.end()


def outgoing(method: str, url: str) -> Outgoing | None:
    """The span of one call to ``url`` and its ``traceparent``; None when no traced request is
    current (tracing off, or a call of the process's own, such as a card refresh)."""
    if not _on:
        return None
    tracing = _current.get()
    if tracing is None:
        return None
    from opentelemetry.trace import SpanKind

    where = urlsplit(url)
    span = tracing.tracer.start_span(
        f"{method} {where.path}",  # the host goes in an attribute: span names stay few
        kind=SpanKind.CLIENT,
        # Without the query: a client's key may ride in one.
        attributes={"http.request.method": method, "url.full": f"{where.scheme}://{where.netloc}{where.path}"},
    )
    return Outgoing(span, tracing.headers_of(span))


def tracer_for(settings: TracingSettings | None, component: str) -> Tracing | None:
    """This process's Tracing for ``settings`` (made on first use, then kept); None when off.
    A config edit that changes the settings makes a new one; the old one flushes and stops."""
    global _on
    if settings is None:
        return None
    key = (settings, component)
    found = _started.get(key)
    if found is not None:
        return found
    with _lock:
        found = _started.get(key)
        if found is None:
            stale = [k for k in _started if k[1] == component]
            found = _started[key] = Tracing(settings, component)
            _on = True
            for old in stale:
                # Off the caller's path: shutting down waits for the last export.
                threading.Thread(target=_started.pop(old).shutdown, daemon=True).start()
    return found


def shutdown() -> None:
    """Flush and stop every Tracing of this process (a server stopping)."""
    with _lock:
        started = list(_started.values())
        _started.clear()
    for tracing in started:
        tracing.shutdown()


_OFF: AbstractContextManager[None] = nullcontext()
_on = False  # some Tracing was made: only then is the context variable read
_current: ContextVar[Tracing | None] = ContextVar("vllm_sr_tracing", default=None)
_started: dict[tuple[TracingSettings, str], Tracing] = {}
_lock = threading.Lock()


__all__ = [
    "REQUEST_ID",
    "TRACE_HEADERS",
    "Outgoing",
    "Tracing",
    "TracingSettings",
    "outgoing",
    "set_status",
    "shutdown",
    "step",
    "tracer_for",
]
