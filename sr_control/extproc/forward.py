"""A System One request through the sidecar: read, choose a member, forward, answer (seed 000's
"Forward" path: the ``vllm-sr/auto`` pool and named decision models).

    read      the listener codec reads the body in the listener's schema: the IR and a plan
              (a bad request is answered here, in the listener's error form)
    choose    the members of the model the request names, ranked: able to answer every
              question and read its media (cards), then fewest open calls
    forward   a vllm-sr/5.0 member: Envoy forwards the plan's body to its cluster's
              /v1/decisions (passthrough: the client's bytes; convert: the internal form)
              a systemone/0.2 member: the sidecar makes the standard calls itself (split,
              ``state_text``, reassembled) and answers at once
    answer    the member's reply re-encoded for the client's schema; a member that fails
              (5xx, 429, 529, no connection) is replaced by the next capable one while the
              deadline allows, the sidecar making that call itself
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from sr_base.log import get_logger
from sr_control.compiler.limits import DEADLINE_MARGIN_MS, DEFAULT_DEADLINE_MS
from sr_control.extproc import body as body_parts
from sr_control.extproc.auth import KeysUnavailable, upstream_key
from sr_control.extproc.capability import needs_of
from sr_control.extproc.data import DEFAULT_ALIASES, Member, Offer
from sr_control.extproc.envoy import Answer, Forward
from sr_control.extproc.incoming import Incoming, Sidecar
from sr_control.extproc.metrics import upstream_result
from sr_control.extproc.pool import Ranking
from sr_control.extproc.upstream import CallFailed, Reply
from systemone import Batch, ClientRequest, ItemResult, ListenerCodec, ProtocolError, Request
from systemone import Reply as Answers
from systemone.client import CLIENTS, Policy, Target, WireReply
from systemone.errors import ErrorInfo, UnsupportedCapability
from systemone.ir import frozen_map, items
from systemone.listener import LISTENERS
from systemone.replies import WHOLE_REPLY, WHOLE_REPLY_HEADER, decode_error, decode_reply
from systemone.writing import internal_body

# Statuses after which another member may well answer: overloaded, unavailable, a gateway's.
RETRIABLE = frozenset({429, 502, 503, 504, 529})
DECISIONS = "/v1/decisions"
# What is left of the request's deadline when the sidecar sends it on, in ms: the member
# (vllm-srun serve) stops the request's work when it runs out (docs/extproc/flow.md).
DEADLINE_HEADER = "x-vsr-deadline-ms"
_JSON = (("content-type", "application/json"),)
_log = get_logger("vllm_sr.extproc")


class UnknownModel(ProtocolError):
    reason = "unknown_model"


@dataclass
class Call:
    """A System One request in flight: what was read, and where it went."""

    incoming: Incoming
    codec: ListenerCodec
    req: ClientRequest
    ranking: Ranking
    deadline_ms: int
    member: Member | None = None  # the member Envoy was asked to forward to
    tried: set[str] = field(default_factory=set)
    answered_by: str | None = None  # the member whose answer the client gets (the last, if several)
    sent: bytes = b""  # the client's JSON body as it came (b"" for a multipart body)


def member_body(req: ClientRequest, sent: bytes, model: str) -> tuple[bytes | None, str]:
    """The body for a vllm-sr/5.0 member answering to ``model``, and the plan's form: None (the
    client's own bytes, ``sent``) when the plan is passthrough and every model the request names
    is ``model``; else the internal form, the plan's own unless a model name must change."""
    if not _names_only(req.ir, model):
        return internal_body(req.ir, model), "convert"
    if req.plan.kind == "passthrough":
        return None, "passthrough"
    # A client that already wrote the internal form (json.dumps spacing, every member in the
    # internal order) sent these very bytes: Envoy forwards them as they are, nothing to replace.
    return (None if req.plan.body == sent else req.plan.body), "convert"


def whole_as_sent(call: Call, status: int, whole: str | None) -> bool:
    """Whether the member's reply to the whole request is the client's answer byte for byte: a
    200 the member calls whole (``whole``: its replies.WHOLE_REPLY_HEADER) that the client's
    listener takes as it is. Then nobody needs to read it."""
    return status == 200 and whole == WHOLE_REPLY and call.codec.takes_whole(call.req)


def listener_codec(offer: Offer | None) -> ListenerCodec:
    return LISTENERS[(offer.schema if offer is not None else None) or "vllm-sr/5.0"]


def error_answer(codec: ListenerCodec, error: ProtocolError | ErrorInfo, req: ClientRequest | None = None) -> Answer:
    http = codec.answer_error(error, req)
    return Answer(http.status, http.headers, http.body)


class SystemOne:
    def __init__(self, sidecar: Sidecar) -> None:
        self.s = sidecar

    # ------------------------------------------------------------------------ the request

    async def read(self, incoming: Incoming, body: bytes) -> tuple[Forward | Answer, Call | None]:
        offer = incoming.data.systemone
        codec = listener_codec(offer)
        if offer is None:
            return error_answer(
                codec,
                ProtocolError(
                    f"listener {incoming.listener!r} does not offer System One",
                    status=404,
                    code="not_found",
                    error_type="not_found",
                ),
            ), None
        req: ClientRequest | None = None
        try:
            multipart = body_parts.read(body, incoming.headers.get("content-type", ""))
            req = codec.read(incoming.path, multipart[0] if multipart else body, incoming.headers.items())
            if multipart:
                # The client's bytes are a form, not JSON: the member gets the internal form.
                req = replace(
                    req, ir=body_parts.inline_parts(req.ir, multipart[1]), plan=replace(req.plan, kind="convert")
                )
            for form in req.legacy_forms:
                self.s.metrics.diagnostics.labels(incoming.listener, form).inc()
            name, members = self._resolve(incoming, req.ir)
            ranking = await self.s.pool.rank(name, members, needs_of(req.ir, len(body)))
            if not ranking.capable:
                raise ranking.error()
        except ProtocolError as exc:
            return error_answer(codec, exc, req), None
        deadline = request_deadline_ms(req.ir.deadline_ms, offer.max_deadline_ms)
        call = Call(incoming, codec, req, ranking, deadline, sent=b"" if multipart else body)
        first = ranking.capable[0]
        if first.schema == "vllm-sr/5.0" and self._envoy_forwards(first):
            return self._through_envoy(call, first), call
        return await self._answer_directly(call, ranking.capable), call

    def _envoy_forwards(self, member: Member) -> bool:
        """Whether Envoy takes the request to ``member`` (else the sidecar calls it). ``auto``:
        Envoy where its cluster balances several hosts (per pod, with health checks and
        ejection); a member of one host the sidecar calls itself, one ext_proc message and
        Envoy's upstream work fewer (docs/extproc/flow.md)."""
        forwarding = self.s.settings.forwarding
        return forwarding == "envoy" or (forwarding == "auto" and member.several_hosts)

    def _resolve(self, incoming: Incoming, ir: Request | Batch) -> tuple[str, tuple[Member, ...]]:
        asked = ir.model if ir.model is not None else next((r.model for _, r in items(ir) if r.model is not None), None)
        resolved = incoming.data.resolve(asked)
        if resolved is None:
            offer = incoming.data.systemone
            served = ", ".join(offer.models) if offer is not None else ""
            default = incoming.data.default_model()
            raise UnknownModel(
                f"Unknown model: {asked} (listener {incoming.listener!r} serves {served}; 'jev-latest' or no model mean {default})"
            )
        return resolved

    def _through_envoy(self, call: Call, member: Member) -> Forward:
        body, form = member_body(call.req, call.sent, member.model)
        self.s.metrics.diagnostics.labels(call.incoming.listener, form).inc()
        call.member = member
        call.tried.add(member.name)
        self.s.pool.begin(member)
        sets = [
            # The member stops at the deadline and answers 504 in JSON; Envoy's own timeout (an
            # empty 504) is the backstop after it.
            (DEADLINE_HEADER, str(_left_ms(call))),
            ("x-envoy-upstream-rq-timeout-ms", str(_left_ms(call) + DEADLINE_MARGIN_MS)),
            # Envoy's access log shows the path the client asked for, not /v1/decisions (without
            # the query: the header goes upstream too, and a query may hold a client's key).
            ("x-envoy-original-path", call.incoming.path.partition("?")[0]),
        ]
        if body is not None:
            sets.append(("content-type", "application/json"))
        # No key here: Envoy adds the member's own as the request leaves for its cluster, and a
        # listener with keys drops the client's (sr_control/compiler/credentials.py), so no
        # ext_proc answer carries a key.
        return Forward(
            cluster=member.cluster, path=member.path(DECISIONS), body=body, set_headers=tuple(sets), member=member.name
        )

    # ------------------------------------------------------------------------ the answer

    async def on_response_headers(
        self, call: Call, status: int, headers: dict[str, str], end_of_stream: bool
    ) -> Answer | None:
        """The forwarded member answered ``status``: fail over now, answer now (no body), or go on."""
        member = call.member
        assert member is not None
        self.s.pool.end(member)
        self.s.metrics.upstream.labels(member.name, upstream_result(status)).inc()
        if status in RETRIABLE:
            others = [m for m in call.ranking.capable if m.name not in call.tried]
            if status >= 500 and status != 504:
                self.s.cards.failed(member, f"answered {status}")
            if others and call.incoming.remaining_s(call.deadline_ms) > 0:
                _log.warning(
                    "failing over",
                    request_id=call.incoming.request_id,
                    member=member.name,
                    status=status,
                    to=[m.name for m in others],
                )
                self.s.metrics.failovers.labels(call.incoming.listener).inc()
                return await self._answer_directly(call, others)
        if end_of_stream:
            return self.reencode(call, status, headers, b"")
        return None

    def reencode(self, call: Call, status: int, headers: dict[str, str], body: bytes) -> Answer:
        """The member's /v1/decisions reply as the client's endpoint and schema answer it."""
        codec, req = call.codec, call.req
        try:
            if status != 200:
                return _http(codec.answer_upstream_error(req, status, headers.items(), body))
            return Answer(200, _JSON, codec.answer_success(req, body))
        except ProtocolError as exc:
            return error_answer(codec, exc, req)
        except Exception as exc:  # noqa: BLE001 - whatever the member sent, the client gets a 502
            return error_answer(codec, unreadable(call, call.member, exc), req)

    # ------------------------------------------------------------------------ calls made here

    async def _answer_directly(self, call: Call, candidates: Iterable[Member]) -> Answer:
        """Call members in turn until every request of the call is answered or time runs out."""
        ir = call.req.ir
        pending = [name for name, _ in items(ir)]
        results: dict[str, ItemResult] = {}
        last: ErrorInfo | None = None
        for member in candidates:
            if not pending or call.incoming.remaining_s(call.deadline_ms) <= 0:
                break
            call.tried.add(member.name)
            sub = _subset(ir, pending)
            try:
                if member.schema == "vllm-sr/5.0":
                    answered, failure = await self._call_runtime(call, member, sub)
                    if isinstance(answered, bytes):
                        call.answered_by = member.name
                        return Answer(200, _JSON, answered)  # whole, and the client's answer as it is
                else:
                    answered, failure = await self._call_standard(call, member, sub)
            except KeysUnavailable as exc:
                answered, failure = (
                    {},
                    ErrorInfo(503, "unavailable", str(exc), "overloaded_error", "upstream_key_unavailable"),
                )
            except UnsupportedCapability as exc:
                answered, failure = {}, exc.info  # what the target cannot carry; another may
            results.update(answered)
            if answered:
                call.answered_by = member.name
            pending = [n for n in pending if n not in answered]
            if failure is not None:
                last = failure
        if pending:
            missing = last or ErrorInfo(
                504,
                "deadline_exceeded",
                f"no member answered within the deadline of {call.deadline_ms} ms",
                "timeout",
                "deadline_exceeded",
            )
            if len(pending) == len(list(items(ir))) and not results:
                return error_answer(call.codec, missing, call.req)
            for name in pending:
                results[name] = ItemResult(error=missing)
        model = next((r.model for r in results.values() if r.model), None)
        reply = Answers({name: results[name] for name, _ in items(ir)}, model)
        try:
            return Answer(200, _JSON, call.codec.answer_success(call.req, reply))
        except ProtocolError as exc:
            return error_answer(call.codec, exc, call.req)

    async def _call_runtime(
        self, call: Call, member: Member, sub: Request | Batch
    ) -> tuple[dict[str, ItemResult] | bytes, ErrorInfo | None]:
        """One /v1/decisions call to a vllm-sr/5.0 member: every item answered, or a failure; or,
        when the member calls its reply to the whole request whole and that is the client's
        answer as it is (``x-vsr-reply``), the reply's own bytes, never read."""
        headers = [
            ("content-type", "application/json"),
            ("x-request-id", call.incoming.request_id),
            (DEADLINE_HEADER, str(_left_ms(call))),
        ]
        key = upstream_key(member.api_key_env)
        if key is not None:
            headers.append(("authorization", f"Bearer {key}"))
        body, form = (
            member_body(call.req, call.sent, member.model)
            if sub is call.req.ir
            else (internal_body(sub, member.model), "convert")
        )
        self.s.metrics.diagnostics.labels(call.incoming.listener, form).inc()
        # At most max_concurrency calls open to it, as Envoy's circuit breaker allows: the rest
        # wait their turn, within the deadline.
        with self.s.pool.calling(member):
            reply = await self._gated_post(
                member, member.origin + member.path(DECISIONS), call.sent if body is None else body, headers, call
            )
        if isinstance(reply, ErrorInfo):
            return {}, reply
        names = [name for name, _ in items(sub)]
        if sub is call.req.ir and whole_as_sent(call, reply.status, reply.header(WHOLE_REPLY_HEADER)):
            return reply.body, None
        if reply.status == 200:
            try:
                decoded = decode_reply(reply.body, sub)
            except ProtocolError as exc:
                return {}, exc.info
            except Exception as exc:  # noqa: BLE001 - a reply of the wrong shape
                return {}, unreadable(call, member, exc)
            return {n: decoded.items[n] for n in names if n in decoded.items}, None
        info = decode_error(reply.status, reply.headers, reply.body)
        if reply.status in RETRIABLE:
            return {}, info
        return {n: ItemResult(error=info) for n in names}, None

    async def _call_standard(
        self, call: Call, member: Member, sub: Request | Batch
    ) -> tuple[dict[str, ItemResult], ErrorInfo | None]:
        """A systemone/0.2 member: the client codec's plan (split, presets, ``state_text``),
        at most ``max_concurrency`` calls at once, within the caller's deadline."""
        codec = CLIENTS["systemone/0.2"]
        remaining_ms = max(1, int(call.incoming.remaining_s(call.deadline_ms) * 1000))
        target = Target(
            member.schema,
            model=member.model,
            deviations=member.deviations,
            max_concurrency=member.max_concurrency,
            path=member.systemone_path,
        )
        plan = codec.plan(sub, target, Policy(deadline_ms=remaining_ms))
        key = upstream_key(member.api_key_env)
        auth = (("authorization", f"Bearer {key}"),) if key is not None else ()
        answered: dict[str, ItemResult] = {}
        failure: ErrorInfo | None = None

        async def one(wire: Any) -> None:
            nonlocal failure
            reply = await self._gated_post(
                member,
                member.origin + wire.path,
                wire.body,
                [*wire.headers, *auth, ("x-request-id", call.incoming.request_id)],
                call,
            )
            if isinstance(reply, ErrorInfo):
                if reply.code == "deadline_exceeded":
                    answered.update(codec.missed(plan, wire))
                failure = reply
                return
            try:
                got = codec.decode_reply(plan, wire, WireReply(reply.status, reply.body, reply.headers))
            except Exception as exc:  # noqa: BLE001 - a reply of the wrong shape
                failure = unreadable(call, member, exc)
                return
            for name, result in got.items():
                if result.error is not None and result.error.status in RETRIABLE:
                    failure = result.error
                else:
                    answered[name] = result

        with self.s.pool.calling(member):
            await asyncio.gather(*(one(w) for w in plan.calls))
        return answered, failure

    async def _gated_post(
        self, member: Member, url: str, body: bytes, headers: list[tuple[str, str]], call: Call
    ) -> Reply | ErrorInfo:
        """``_post`` within the member's ``max_concurrency``: a call waits for its turn only while
        the deadline allows, then the client gets its 504 in the listener's form."""
        gate = self.s.pool.gate(member)
        try:
            async with asyncio.timeout(max(0.0, call.incoming.remaining_s(call.deadline_ms))):
                await gate.acquire()
        except TimeoutError:
            why = f"{member.name} had no free call (max_concurrency {member.max_concurrency}) within the deadline of {call.deadline_ms} ms"
            return ErrorInfo(504, "deadline_exceeded", why, "timeout", "deadline_exceeded")
        try:
            return await self._post(member, url, body, headers, call)
        finally:
            gate.release()

    async def _post(
        self, member: Member, url: str, body: bytes, headers: list[tuple[str, str]], call: Call
    ) -> Reply | ErrorInfo:
        timeout = call.incoming.remaining_s(call.deadline_ms)
        try:
            reply = await self.s.http.request("POST", url, body=body, headers=headers, timeout_s=timeout)
        except CallFailed as exc:
            self.s.metrics.upstream.labels(member.name, exc.kind).inc()
            if exc.kind == "timeout":
                return ErrorInfo(
                    504,
                    "deadline_exceeded",
                    f"{member.name} did not answer within the deadline of {call.deadline_ms} ms",
                    "timeout",
                    "deadline_exceeded",
                )
            self.s.cards.failed(member, str(exc))
            return ErrorInfo(
                503,
                "unavailable",
                f"{member.name} cannot be reached: {exc}",
                "overloaded_error",
                "member_unreachable",
                retry_after=1.0,
            )
        self.s.metrics.upstream.labels(member.name, upstream_result(reply.status)).inc()
        if reply.status >= 500 and reply.status not in (504,):
            self.s.cards.failed(member, f"answered {reply.status}")
        return reply


def request_deadline_ms(asked: int | None, listener_max: int | None) -> int:
    """Every request's deadline: the client's ``options.deadline_ms`` capped by the listener's
    ``max_deadline_ms`` (compiled into the sidecar's data; the compiler's default where absent)."""
    cap = listener_max if listener_max is not None else DEFAULT_DEADLINE_MS
    return cap if asked is None else min(asked, cap)


def _left_ms(call: Call) -> int:
    return max(1, int(call.incoming.remaining_s(call.deadline_ms) * 1000))


def unreadable(call: Call, member: Member | None, exc: BaseException) -> ErrorInfo:
    """A member's reply the codec could not read: 502 for the client (the member's fault, and
    another member may do better), with the traceback in the log."""
    if isinstance(exc, ProtocolError):
        return exc.info
    name = member.name if member is not None else "the member"
    _log.warning(
        "member reply unreadable",
        request_id=call.incoming.request_id,
        member=name,
        error=f"{type(exc).__name__}: {exc}",
    )
    return ErrorInfo(
        502,
        "invalid_model_output",
        f"{name} answered with a reply that cannot be read ({type(exc).__name__}: {exc})",
        "upstream_error",
        "invalid_model_output",
    )


# ---------------------------------------------------------------------------- the IR for a member


def _names_only(ir: Request | Batch, model: str) -> bool:
    """Every model name in ``ir`` is absent, the standard's alias, or ``model``."""
    names = [ir.model, *(r.model for _, r in items(ir))] if isinstance(ir, Batch) else [ir.model]
    return all(n is None or n == model or n in DEFAULT_ALIASES for n in names)


def _subset(ir: Request | Batch, names: list[str]) -> Request | Batch:
    if isinstance(ir, Request) or len(names) == len(ir.items):
        return ir
    return Batch(frozen_map((n, ir.items[n]) for n in names), "requests", ir.model, ir.options, ir.long_context)


def _http(answer: Any) -> Answer:
    return Answer(answer.status, answer.headers, answer.body)


__all__ = ["RETRIABLE", "Call", "SystemOne", "error_answer", "listener_codec", "whole_as_sent"]
