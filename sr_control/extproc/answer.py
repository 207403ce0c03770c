"""Last step of a System One request's path (systemone_path.py): the client's answer.

    reencode(call, status, headers, body)        a member's /v1/decisions reply, as the client's
                                                 endpoint and schema answer it
    answer_items(call, results, pending, last)   the items the sidecar's own calls answered; any
                                                 left unanswered carry the last failure
    whole_as_sent(call, status, whole)           whether a member's reply is the client's answer
                                                 byte for byte (then nobody reads it)
    error_answer(codec, error, req)              an error in the listener's form
    unreadable(call, member, exc)                a reply that cannot be read: 502 for the client

Whatever a member sends, the client gets an answer in its listener's form, never the sidecar's
own 500: a reply of the wrong shape is the member's fault (502 ``invalid_model_output``).
"""

from __future__ import annotations

from sr_base.log import get_logger
from sr_control.extproc.call import Call
from sr_control.extproc.data import Member
from sr_control.extproc.envoy import Answer
from sr_control.extproc.incoming import Incoming
from systemone import ClientRequest, HttpAnswer, ItemResult, ListenerCodec, ProtocolError, Reply
from systemone.errors import ErrorInfo
from systemone.ir import items
from systemone.replies import WHOLE_REPLY

JSON_HEADERS = (("content-type", "application/json"),)
_log = get_logger("vllm_sr.extproc")


def reencode(call: Call, status: int, headers: dict[str, str], body: bytes) -> Answer:
    """The member's /v1/decisions reply as the client's endpoint and schema answer it."""
    codec, req = call.codec, call.req
    try:
        if status != 200:
            return _as_answer(codec.answer_upstream_error(req, status, headers.items(), body))
        return Answer(200, JSON_HEADERS, codec.answer_success(req, body))
    except ProtocolError as exc:
        return error_answer(codec, exc, req)
    except Exception as exc:  # noqa: BLE001 - whatever the member sent, the client gets a 502
        return error_answer(codec, unreadable(call.incoming, call.member, exc), req)


def answer_items(call: Call, results: dict[str, ItemResult], pending: list[str], last: ErrorInfo | None) -> Answer:
    """The client's answer to the items of ``call``: ``results`` as the members answered them;
    the ``pending`` ones none answered carry ``last`` (the last failure; else the deadline's).
    None answered at all: that error is the whole answer."""
    ir = call.req.ir
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
    reply = Reply({name: results[name] for name, _ in items(ir)}, model)
    try:
        return Answer(200, JSON_HEADERS, call.codec.answer_success(call.req, reply))
    except ProtocolError as exc:
        return error_answer(call.codec, exc, call.req)


def whole_as_sent(call: Call, status: int, whole: str | None) -> bool:
    """Whether the member's reply to the whole request is the client's answer byte for byte: a
    200 the member calls whole (``whole``: its replies.WHOLE_REPLY_HEADER) that the client's
    listener takes as it is. Then nobody needs to read it."""
    return status == 200 and whole == WHOLE_REPLY and call.codec.takes_whole(call.req)


def error_answer(codec: ListenerCodec, error: ProtocolError | ErrorInfo, req: ClientRequest | None = None) -> Answer:
    http = codec.answer_error(error, req)
    return Answer(http.status, http.headers, http.body)


def unreadable(incoming: Incoming, member: Member | None, exc: BaseException) -> ErrorInfo:
    """A member's reply the codec could not read: 502 for the client (the member's fault, and
    another member may do better), with the traceback in the log."""
    if isinstance(exc, ProtocolError):
        return exc.info
    name = member.name if member is not None else "the member"
    _log.warning(
        "member reply unreadable",
        request_id=incoming.request_id,
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


def _as_answer(http: HttpAnswer) -> Answer:
    """A codec's HTTP answer as the sidecar sends it."""
    return Answer(http.status, http.headers, http.body)


__all__ = ["JSON_HEADERS", "answer_items", "error_answer", "reencode", "unreadable", "whole_as_sent"]
