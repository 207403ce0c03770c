"""Step 4 of a System One request's path (systemone_path.py): fail over to the next capable member.

    next_members(sidecar, call, status)        the member Envoy forwarded to answered
                                               ``status``: its call is over; when it failed
                                               (429, 502, 503, 504, 529) and the deadline
                                               allows, the capable members not tried yet
    await call_in_turn(sidecar, call, members) the sidecar calls members in turn (members.py)
                                               until every item is answered or time runs out

Envoy retries only within the one cluster it was given, so going on to another member is the
sidecar's: it makes those calls itself, whoever called the first. What the client gets is the
next step's (answer.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from sr_base.log import get_logger
from sr_control.extproc.answer import JSON_HEADERS, answer_items
from sr_control.extproc.auth import KeysUnavailable
from sr_control.extproc.call import Call
from sr_control.extproc.data import Member
from sr_control.extproc.envoy import Answer
from sr_control.extproc.incoming import Sidecar
from sr_control.extproc.members import RETRIABLE, call_runtime, call_standard, subset
from sr_control.extproc.metrics import upstream_result
from systemone import ItemResult
from systemone.errors import ErrorInfo, UnsupportedCapability
from systemone.ir import items

_log = get_logger("vllm_sr.extproc")


def next_members(sidecar: Sidecar, call: Call, status: int) -> list[Member]:
    """After the reply of the member Envoy forwarded to (counted, its call closed): the members
    to call next, none when it answered or no time is left. A member that answers a 5xx other
    than 504 is marked down."""
    member = call.member
    assert member is not None
    sidecar.pool.end(member)
    sidecar.metrics.upstream.labels(member.name, upstream_result(status)).inc()
    if status not in RETRIABLE:
        return []
    others = [m for m in call.ranking.capable if m.name not in call.tried]
    if status >= 500 and status != 504:
        sidecar.cards.failed(member, f"answered {status}")
    if not others or call.remaining_s() <= 0:
        return []
    _log.warning(
        "failing over",
        request_id=call.incoming.request_id,
        member=member.name,
        status=status,
        to=[m.name for m in others],
    )
    sidecar.metrics.failovers.labels(call.incoming.listener).inc()
    call.answered_by = None  # its reply is not the client's: one of the others answers, or none
    return others


async def call_in_turn(sidecar: Sidecar, call: Call, members: Iterable[Member]) -> Answer:
    """Call ``members`` in turn until every item of the request is answered or time runs out:
    each one gets the items the ones before it left unanswered."""
    ir = call.req.ir
    pending = [name for name, _ in items(ir)]
    results: dict[str, ItemResult] = {}
    last: ErrorInfo | None = None
    for member in members:
        if not pending or call.remaining_s() <= 0:
            break
        call.tried.add(member.name)
        sub = subset(ir, pending)
        try:
            if member.schema == "vllm-sr/5.0":
                answered, failure = await call_runtime(sidecar, call, member, sub)
                if isinstance(answered, bytes):
                    call.answered_by = member.name
                    return Answer(200, JSON_HEADERS, answered)  # whole, and the client's answer as it is
            else:
                answered, failure = await call_standard(sidecar, call, member, sub)
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
    return answer_items(call, results, pending, last)


__all__ = ["call_in_turn", "next_members"]
