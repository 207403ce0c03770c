"""Step 3, call, by the sidecar (systemone_path.py): the sidecar calls a member itself.

    call_runtime(sidecar, call, member, sub)    one /v1/decisions call to a vllm-sr/5.0 member
    call_standard(sidecar, call, member, sub)   a systemone/0.2 member: the standard calls its
                                                client codec plans (split, presets, state_text)

Each answers (the items answered, the failure another member may do better on): a reply in
``RETRIABLE`` or no reply at all is a failure, any other error reply is the items' answer. Every
call waits its turn within the member's ``max_concurrency`` and the request's deadline, is
counted open while it runs (pool.py), and marks a member that fails down (cards.py). Calling the
next member after a failure is the next step's (failover.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from sr_base.tracing import step
from sr_control.extproc.answer import unreadable, whole_as_sent
from sr_control.extproc.auth import upstream_key
from sr_control.extproc.call import Call
from sr_control.extproc.data import Member
from sr_control.extproc.forward import DEADLINE_HEADER, DECISIONS, member_body
from sr_control.extproc.incoming import Sidecar
from sr_control.extproc.metrics import upstream_result
from sr_control.extproc.upstream import CallFailed, Reply
from systemone import Batch, ItemResult, ProtocolError, Request
from systemone.client import CLIENTS, Policy, Target, WireReply
from systemone.errors import ErrorInfo
from systemone.ir import frozen_map, items
from systemone.replies import WHOLE_REPLY_HEADER, decode_error, decode_reply
from systemone.writing import internal_body

# Statuses after which another member may well answer: overloaded, unavailable, a gateway's.
RETRIABLE = frozenset({429, 502, 503, 504, 529})


async def call_runtime(
    sidecar: Sidecar, call: Call, member: Member, sub: Request | Batch
) -> tuple[dict[str, ItemResult] | bytes, ErrorInfo | None]:
    """One /v1/decisions call to a vllm-sr/5.0 member: every item answered, or a failure; or,
    when the member calls its reply to the whole request whole and that is the client's
    answer as it is (``x-vsr-reply``), the reply's own bytes, never read."""
    headers = [
        ("content-type", "application/json"),
        ("x-request-id", call.incoming.request_id),
        (DEADLINE_HEADER, str(call.left_ms())),
    ]
    key = upstream_key(member.api_key_env)
    if key is not None:
        headers.append(("authorization", f"Bearer {key}"))
    body, form = (
        member_body(call.req, call.sent, member.model)
        if sub is call.req.ir
        else (internal_body(sub, member.model), "convert")
    )
    sidecar.metrics.diagnostics.labels(call.incoming.listener, form).inc()
    # At most max_concurrency calls open to it, as Envoy's circuit breaker allows: the rest
    # wait their turn, within the deadline.
    with sidecar.pool.calling(member):
        reply = await _gated_post(
            sidecar, member, member.origin + member.path(DECISIONS), call.sent if body is None else body, headers, call
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
            return {}, unreadable(call.incoming, member, exc)
        return {n: decoded.items[n] for n in names if n in decoded.items}, None
    info = decode_error(reply.status, reply.headers, reply.body)
    if reply.status in RETRIABLE:
        return {}, info
    return {n: ItemResult(error=info) for n in names}, None


async def call_standard(
    sidecar: Sidecar, call: Call, member: Member, sub: Request | Batch
) -> tuple[dict[str, ItemResult], ErrorInfo | None]:
    """A systemone/0.2 member: the client codec's plan (split, presets, ``state_text``),
    at most ``max_concurrency`` calls at once, within the caller's deadline."""
    codec = CLIENTS["systemone/0.2"]
    target = Target(
        member.schema,
        model=member.model,
        deviations=member.deviations,
        max_concurrency=member.max_concurrency,
        path=member.systemone_path,
    )
    plan = codec.plan(sub, target, Policy(deadline_ms=call.left_ms()))
    key = upstream_key(member.api_key_env)
    auth = (("authorization", f"Bearer {key}"),) if key is not None else ()
    answered: dict[str, ItemResult] = {}
    failure: ErrorInfo | None = None

    async def one(wire: Any) -> None:
        nonlocal failure
        reply = await _gated_post(
            sidecar,
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
            failure = unreadable(call.incoming, member, exc)
            return
        for name, result in got.items():
            if result.error is not None and result.error.status in RETRIABLE:
                failure = result.error
            else:
                answered[name] = result

    with sidecar.pool.calling(member):
        await asyncio.gather(*(one(w) for w in plan.calls))
    return answered, failure


def subset(ir: Request | Batch, names: list[str]) -> Request | Batch:
    """The items of ``ir`` named (``ir`` itself when that is all of them)."""
    if isinstance(ir, Request) or len(names) == len(ir.items):
        return ir
    return Batch(frozen_map((n, ir.items[n]) for n in names), "requests", ir.model, ir.options, ir.long_context)


async def _gated_post(
    sidecar: Sidecar, member: Member, url: str, body: bytes, headers: list[tuple[str, str]], call: Call
) -> Reply | ErrorInfo:
    """``_post`` within the member's ``max_concurrency``: a call waits for its turn only while
    the deadline allows, then the client gets its 504 in the listener's form."""
    with step(f"call {member.name}", **{"vllm_sr.member": member.name}):
        return await _gated(sidecar, member, url, body, headers, call)


async def _gated(
    sidecar: Sidecar, member: Member, url: str, body: bytes, headers: list[tuple[str, str]], call: Call
) -> Reply | ErrorInfo:
    gate = sidecar.pool.gate(member)
    try:
        async with asyncio.timeout(max(0.0, call.remaining_s())):
            await gate.acquire()
    except TimeoutError:
        why = (
            f"{member.name} had no free call (max_concurrency {member.max_concurrency}) "
            f"within the deadline of {call.deadline_ms} ms"
        )
        return ErrorInfo(504, "deadline_exceeded", why, "timeout", "deadline_exceeded")
    try:
        return await _post(sidecar, member, url, body, headers, call)
    finally:
        gate.release()


async def _post(
    sidecar: Sidecar, member: Member, url: str, body: bytes, headers: list[tuple[str, str]], call: Call
) -> Reply | ErrorInfo:
    try:
        reply = await sidecar.http.request("POST", url, body=body, headers=headers, timeout_s=call.remaining_s())
    except CallFailed as exc:
        sidecar.metrics.upstream.labels(member.name, exc.kind).inc()
        if exc.kind == "timeout":
            return ErrorInfo(
                504,
                "deadline_exceeded",
                f"{member.name} did not answer within the deadline of {call.deadline_ms} ms",
                "timeout",
                "deadline_exceeded",
            )
        sidecar.cards.failed(member, str(exc))
        return ErrorInfo(
            503,
            "unavailable",
            f"{member.name} cannot be reached: {exc}",
            "overloaded_error",
            "member_unreachable",
            retry_after=1.0,
        )
    sidecar.metrics.upstream.labels(member.name, upstream_result(reply.status)).inc()
    if reply.status >= 500 and reply.status not in (504,):
        sidecar.cards.failed(member, f"answered {reply.status}")
    return reply


__all__ = ["RETRIABLE", "call_runtime", "call_standard", "subset"]
