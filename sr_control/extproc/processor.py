"""The ext_proc servicer: one gRPC stream per HTTP request, one answer per message.

    request_headers   the route's metadata names listener, API and config version: find that
                      version's data (waiting a bounded time), check the listener's key,
                      answer listings at once
    request_body      System One: read, choose, then Envoy forwards or the sidecar calls
                      and answers (systemone_path.py, its steps top to bottom);
                      LLM APIs: pick the provider by ``model`` (llm.py), or
                      decide it when ``model`` is a virtual model (decide.py)
    response_headers  a decided LLM request whose judge reads the answer asks for its body
                      (only an API with a judge sends this phase; Envoy adds x-vsr-decision
                      and x-vsr-model from the decision's dynamic metadata); a failed member
                      is replaced by another (fail-over); a reply the member calls whole that
                      is the client's answer as it is goes through unread; else go on
    response_body     the member's reply in the client's schema; a judged LLM answer, kept or
                      escalated

The servicer only moves messages: what to do with each is the handlers'. Errors meet one
boundary here: a ProtocolError is the client's answer in its listener's form; anything else is
logged with its traceback, counted, and answered 500, and the sidecar serves on.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from sr_base.log import get_logger
from sr_base.tracing import REQUEST_ID, TRACE_HEADERS, Tracing, set_status, step, tracer_for
from sr_control.compiler.names import CLUSTER_HEADER
from sr_control.decide.rewrite import response_headers
from sr_control.extproc import envoy, llm
from sr_control.extproc.answer import error_answer, whole_as_sent
from sr_control.extproc.auth import TWO_KEYS, KeysUnavailable
from sr_control.extproc.call import Call
from sr_control.extproc.data import SYSTEMONE_API
from sr_control.extproc.decide import Decided, decide_request, virtual_model
from sr_control.extproc.envoy import Answer, Forward
from sr_control.extproc.incoming import Incoming, Sidecar
from sr_control.extproc.judge import escalation, judge
from sr_control.extproc.listing import listing
from sr_control.extproc.read import listener_codec
from sr_control.extproc.systemone_path import SystemOne
from systemone import ProtocolError
from systemone.replies import WHOLE_REPLY_HEADER

if TYPE_CHECKING:
    from opentelemetry.trace import Span

LISTING_API = "models"
VERSION_HEADER = "x-vsr-config-version"
MEMBER_HEADER = "x-vsr-member"  # the pool member whose answer a System One client gets
_SYSTEMONE_SHAPED = frozenset({SYSTEMONE_API, LISTING_API})
_log = get_logger("vllm_sr.extproc")


class AuthenticationFailed(ProtocolError):
    status = 401
    code = "unauthorized"
    error_type = "authentication_error"


class Processor(pb_grpc.ExternalProcessorServicer):
    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar
        self.systemone = SystemOne(sidecar)

    async def Process(
        self, requests: AsyncIterator[pb.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ProcessingResponse]:  # noqa: N802 - gRPC's name
        exchange = Exchange(
            self.sidecar,
            self.systemone,
            # Envoy's route names listener, API and version; its tracer adds the trace context.
            {k: v for k, v in context.invocation_metadata() or () if k.startswith("x-vsr-") or k in TRACE_HEADERS},
        )
        try:
            async for message in requests:
                yield await exchange.handle(message)
                if exchange.done:
                    return
        finally:
            exchange.finish()


class Exchange:
    """One HTTP request's stream: what was read, where it went, what the client got."""

    def __init__(self, sidecar: Sidecar, systemone: SystemOne, metadata: dict[str, Any]) -> None:
        self.sidecar = sidecar
        self.systemone = systemone
        self.meta = metadata
        self.started = time.monotonic()
        self.api: str = metadata.get("x-vsr-api", "")
        self.listener: str = metadata.get("x-vsr-listener", "")
        self.incoming: Incoming | None = None
        self.call: Call | None = None
        self.upstream_status = 0
        self.upstream_headers: dict[str, str] = {}
        self.status: int | None = None  # what the client got
        self.decided: Decided | None = None  # an LLM request the Decide path routed
        self.done = False
        self.span: _Traced | None = None  # the request's span when its config traces (sr_base/tracing.py)

    async def handle(self, message: pb.ProcessingRequest) -> pb.ProcessingResponse:
        if self.span is None:
            return await self._handle(message)
        # Each phase runs under the request's span: its steps and calls are the span's children.
        with self.span.tracing.within(self.span.span):
            return await self._handle(message)

    async def _handle(self, message: pb.ProcessingRequest) -> pb.ProcessingResponse:
        kind = message.WhichOneof("request")
        try:
            if kind == "request_headers":
                return await self._request_headers(message.request_headers)
            if kind == "request_body":
                return await self._request_body(message.request_body.body)
            if kind == "response_headers":
                return await self._response_headers(message.response_headers)
            if kind == "response_body":
                return await self._response_body(message.response_body.body)
        except Exception as exc:  # noqa: BLE001 - the one boundary for what nothing else caught
            return self._immediate(self._internal_error(exc))
        # Trailers are never asked for (the routes SKIP them); answer in kind all the same.
        return pb.ProcessingResponse(**{kind: pb.TrailersResponse()}) if kind else envoy.CONTINUE_REQUEST_HEADERS

    # ------------------------------------------------------------------------ phases

    async def _request_headers(self, message: pb.HttpHeaders) -> pb.ProcessingResponse:
        headers = envoy.headers_of(message)
        version = self.meta.get("x-vsr-config-version", "")
        store = self.sidecar.store
        data = store.get(version)
        if data is None:
            data = await store.wait(version, self.sidecar.settings.version_wait_ms / 1000) if version else None
            self.sidecar.metrics.version_waits.labels("arrived" if data is not None else "timeout").inc()
            if data is None:
                return self._immediate(self._unknown_version(version))
        if data.listener != self.listener:
            # Envoy sends the version its route was compiled with, always the route's own
            # listener's. A version of another listener (one without keys, say) would lend this
            # request that listener's auth: refused as a version this listener never had.
            _log.warning(
                "config version of another listener", listener=self.listener, version=version, belongs_to=data.listener
            )
            return self._immediate(self._unknown_version(version))
        request_id = headers.get("x-request-id") or uuid.uuid4().hex
        tracing = tracer_for(data.tracing, "sidecar")
        if tracing is not None:
            attributes = {
                REQUEST_ID: request_id,
                "vllm_sr.listener": self.listener,
                "vllm_sr.api": self.api,
                "vllm_sr.config_version": version,
            }
            self.span = _Traced(tracing, tracing.server_span(f"ext_proc {self.api}", self.meta, attributes))
        incoming = self.incoming = Incoming(
            self.listener,
            self.api,
            data,
            headers.get(":method", ""),
            headers.get(":path", ""),
            headers,
            request_id,
            self.started,
        )
        if data.auth is not None:
            denied = self._check_key(incoming, sum(1 for h in message.headers.headers if h.key == "authorization"))
            if denied is not None:
                return self._immediate(denied)
        if self.api == LISTING_API:
            return self._immediate(await listing(self.sidecar, incoming))
        if message.end_of_stream:  # a body API with no body: answered as an empty body
            return await self._request_body(b"")
        return envoy.CONTINUE_REQUEST_HEADERS

    async def _request_body(self, body: bytes) -> pb.ProcessingResponse:
        incoming = self.incoming
        assert incoming is not None, "Envoy sends request headers first"
        out: Forward | Answer
        if self.api == SYSTEMONE_API:
            out, self.call = await self.systemone.request(incoming, body)
        elif self.api in incoming.data.offers:
            plan = virtual_model(incoming, body)
            escalated = escalation(self.sidecar, incoming, body) if plan is None else None
            if escalated is not None:  # the judge of a request in flight sent this one on
                out = escalated
            elif plan is not None:
                with step("decide"):
                    out, self.decided = await decide_request(self.sidecar, incoming, body, plan)
            else:
                out = llm.route(incoming, body)
        else:
            out = llm.llm_error(
                self.api, 404, f"listener {self.listener!r} does not offer the {self.api} API", "not_found"
            )
        if isinstance(out, Answer):
            response = self._immediate(out)
        else:
            if self.call is None:
                self.status = 0  # forwarded as it is: the provider's status is not seen here
            response = envoy.forward(out, CLUSTER_HEADER)
        if self.decided is not None:
            # The access log's decision and signals; the route adds x-vsr-* to the answer from it.
            envoy.with_metadata(response, envoy.DECIDE_NAMESPACE, self.decided.record)
        return response

    async def _response_headers(self, message: pb.HttpHeaders) -> pb.ProcessingResponse:
        headers = envoy.headers_of(message)
        status = int(headers.get(":status", "0") or 0)
        if self.call is None:
            decided = self.decided
            if decided is None:
                return envoy.CONTINUE_RESPONSE_HEADERS
            if not decided.judged or message.end_of_stream:
                return envoy.pass_response(())  # the route added the x-vsr-* headers
            # The route's judge reads this answer: its body comes to the sidecar, this request only.
            self.upstream_status = status
            out = pb.ProcessingResponse(response_headers=pb.HeadersResponse())
            out.mode_override.response_body_mode = processing_mode_pb2.ProcessingMode.BUFFERED
            return out
        self.upstream_status, self.upstream_headers = status, headers
        answer = await self.systemone.response_headers(self.call, status, headers, message.end_of_stream)
        self.call.member = None  # its call is over (and counted)
        if answer is not None:
            return self._immediate(answer)
        if WHOLE_REPLY_HEADER not in headers:
            return envoy.CONTINUE_RESPONSE_HEADERS
        if whole_as_sent(self.call, status, headers[WHOLE_REPLY_HEADER]):
            # Envoy sends the reply on as it comes; the body is never read here (one message fewer).
            self.status = 200
            self.done = True
            return envoy.pass_response(self._stamp(), (WHOLE_REPLY_HEADER,))
        return envoy.continue_response((WHOLE_REPLY_HEADER,))

    async def _response_body(self, body: bytes) -> pb.ProcessingResponse:
        if self.call is None:
            decided = self.decided
            if decided is None or self.incoming is None:
                return envoy.CONTINUE_RESPONSE_BODY
            listen = self.meta.get("x-vsr-listen")
            judged = await judge(self.sidecar, self.incoming, decided, self.upstream_status, body, listen)
            self.done = True
            # The model that answered (the next one, when the judge escalated) and the judge's
            # answers: in the answer's headers and the access log.
            headers = response_headers(decided.decision, judged.model)
            answer = Answer(judged.status, headers, judged.body)
            response = envoy.replace_response(answer, self.upstream_status, body)
            return envoy.with_metadata(response, envoy.DECIDE_NAMESPACE, judged.record)
        answer = self.systemone.response_body(self.call, self.upstream_status, self.upstream_headers, body)
        self.status = answer.status
        self.done = True
        return envoy.replace_response(self._stamped(answer), self.upstream_status, body)

    # ------------------------------------------------------------------------ answers

    def _immediate(self, answer: Answer) -> pb.ProcessingResponse:
        self.status = answer.status
        self.done = True
        return envoy.immediate(self._stamped(answer), self.call.answered_by if self.call is not None else None)

    def _stamp(self) -> tuple[tuple[str, str], ...]:
        """Which config version answered: an operator can tell the versions apart during an edit;
        and which member answered a System One request (after a fail-over, the last one called)."""
        if self.incoming is None:
            return ()
        version = ((VERSION_HEADER, self.incoming.data.version),)
        member = self.call.answered_by if self.call is not None else None
        return (*version, (MEMBER_HEADER, member)) if member else version

    def _stamped(self, answer: Answer) -> Answer:
        return Answer(answer.status, (*answer.headers, *self._stamp()), answer.body)

    def _error(self, error: ProtocolError, code: str) -> Answer:
        """``error`` in the API's own shape: System One's for its paths and listings."""
        if self.api in _SYSTEMONE_SHAPED or not self.api:
            data = self.incoming.data if self.incoming is not None else None
            return error_answer(listener_codec(data.systemone if data is not None else None), error)
        return llm.llm_error(self.api, error.status, str(error), code)

    def _check_key(self, incoming: Incoming, given: int) -> Answer | None:
        """``given``: how many Authorization headers came; two are refused, as the runtime does."""
        assert incoming.data.auth is not None
        if given > 1:
            return self._error(AuthenticationFailed(TWO_KEYS, reason="invalid_key"), "invalid_api_key")
        try:
            verdict = self.sidecar.keys.check(incoming.data.auth, incoming.headers.get("authorization"))
        except KeysUnavailable as exc:
            _log.error(
                "listener keys unavailable", listener=self.listener, error=str(exc), request_id=incoming.request_id
            )
            return self._error(
                ProtocolError(
                    str(exc),
                    status=503,
                    code="unavailable",
                    error_type="overloaded_error",
                    reason="keys_unavailable",
                    retry_after=1.0,
                ),
                "keys_unavailable",
            )
        if verdict.ok:
            return None
        return self._error(AuthenticationFailed(verdict.message, reason=verdict.reason), "invalid_api_key")

    def _unknown_version(self, version: str) -> Answer:
        wait = self.sidecar.settings.version_wait_ms
        what = (
            f"config version {version!r} of listener {self.listener!r}"
            if version
            else f"the route of listener {self.listener!r} names no config version"
        )
        message = (
            f"the sidecar has not received {what} (waited {wait} ms); retry shortly"
            if version
            else f"{what}; is Envoy fed by a vllm-sr control plane?"
        )
        _log.warning("config version not received", listener=self.listener, version=version, waited_ms=wait)
        return self._error(
            ProtocolError(
                message,
                status=503,
                code="unavailable",
                error_type="overloaded_error",
                reason="config_version_unknown",
                retry_after=1.0,
            ),
            "config_version_unknown",
        )

    def _internal_error(self, exc: BaseException) -> Answer:
        request_id = self.incoming.request_id if self.incoming is not None else ""
        _log.exception(
            "sidecar error",
            listener=self.listener,
            api=self.api,
            request_id=request_id,
            error=f"{type(exc).__name__}: {exc}",
        )
        self.sidecar.metrics.errors.labels(self.api or "unknown").inc()
        message = f"the router failed on this request (request id {request_id}); its log has the details"
        return self._error(
            ProtocolError(message, status=500, code="internal_error", error_type="unknown", reason="sidecar_error"),
            "internal_error",
        )

    def finish(self) -> None:
        if self.call is not None and self.call.member is not None:
            self.sidecar.pool.end(self.call.member)  # the stream ended before the member answered
        if self.span is not None:
            self.span.end(self.status, self.call.answered_by if self.call is not None else None)
        if self.status is None:
            return  # Envoy gave up on the request (client gone): nothing was answered
        api = self.api or "unknown"
        listener = self.listener or "unknown"
        self.sidecar.metrics.requests.labels(listener, api, str(self.status) if self.status else "forwarded").inc()
        self.sidecar.metrics.seconds.labels(listener, api).observe(time.monotonic() - self.started)


class _Traced:
    """A traced request's span in the sidecar, with the Tracing that made it."""

    __slots__ = ("span", "tracing")

    def __init__(self, tracing: Tracing, span: Span) -> None:
        self.tracing, self.span = tracing, span

    def end(self, status: int | None, member: str | None) -> None:
        if status:
            set_status(self.span, status)
        if member is not None:
            self.span.set_attribute("vllm_sr.member", member)
        self.span.end()


__all__ = ["Exchange", "Processor"]
