"""Answers, errors and model listings on the wire: reading an upstream's, writing a client's.

Three body flavours, one per kind of listener:

    standard   systemone/0.2: exactly the standard's members
    vllm-sr    vllm-sr/5.0: the standard plus the extension members (flat error fields, spans...)
    legacy     vllm-sr/4.0: as vllm-sr, plus 4.0's ``{"error": {...}}`` and ``data`` listing, and a
               ``states`` request answered with one entry per state

Errors (seed 002): the standard ``detail`` (a list of located problems on 422, else
``{"error_type", "message"}``) plus the flat ``code``, ``question``, ``state``, ``reason`` and
``limit``. On /v1/systemone the first question that failed, in request order, fails the whole
request; on /v1/decisions each failed question carries its own ``error`` in a 200.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from systemone.errors import (
    ERROR_TYPE_BY_STATUS,
    QUESTION_ERROR_STATUS,
    DetailItem,
    ErrorInfo,
    ProtocolError,
    QuestionFailed,
    UpstreamError,
)
from systemone.generated.strip import REPLY_EXTENSIONS
from systemone.ir import Batch, Endpoint, ItemResult, Listing, ListingItem, Reply, Request
from systemone.jsontext import JsonObject, JsonTextError, Number, dumps_layout, loads, read_plain

Flavour = Literal["standard", "vllm-sr", "legacy"]
_STATUS_CODE = {
    413: "request_too_large",
    422: "invalid_request",
    429: "rate_limited",
    503: "unavailable",
    504: "deadline_exceeded",
    529: "overloaded",
}


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """What a server sends back: status, headers and body bytes."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


# ---------------------------------------------------------------------------- errors


def error_doc(info: ErrorInfo, flavour: Flavour, states_form: bool = False) -> JsonObject:
    members: list[tuple[str, Any]] = [("detail", _detail(info))]
    flat = [(k, getattr(info, k)) for k in ("code", "question", "state", "reason", "limit")]
    if flavour != "standard":
        members += [(k, str(v) if k == "state" else v) for k, v in flat if v is not None]
    if flavour == "legacy":
        legacy: list[tuple[str, Any]] = [("code", info.code), ("message", info.message)]
        for k, v in flat[1:]:
            if v is not None:
                legacy.append((k, int(v) if k == "state" and states_form and str(v).isdigit() else v))
        members.append(("error", JsonObject(legacy)))
    return JsonObject(members)


def _detail(info: ErrorInfo) -> Any:
    if info.status != 422:
        return JsonObject([("error_type", info.error_type), ("message", info.message)])
    items = info.items
    if not items:
        loc: tuple[str | int, ...] = ("body", "questions", info.question) if info.question else ("body",)
        items = (DetailItem(loc, info.message, info.code if info.code != "question_failed" else "invalid_question"),)
    out = []
    for item in items:
        entry: list[tuple[str, Any]] = [("loc", item.loc), ("msg", item.msg), ("type", item.type)]
        if item.ctx:
            entry.append(("ctx", JsonObject(item.ctx)))
        out.append(JsonObject(entry))
    return tuple(out)


def error_headers(info: ErrorInfo) -> tuple[tuple[str, str], ...]:
    headers = [("content-type", "application/json")]
    if info.retry_after is not None:
        headers.append(("retry-after", str(max(0, math.ceil(info.retry_after)))))
        headers.append(("retry-after-ms", str(max(0, round(info.retry_after * 1000)))))
    return tuple(headers)


def decode_error(status: int, headers: Mapping[str, str] | Iterable[tuple[str, str]], body: bytes) -> ErrorInfo:
    """An upstream's error reply as ErrorInfo, whatever shape its body has (see SDK errors)."""
    hdrs = {k.lower(): v for k, v in (headers.items() if isinstance(headers, Mapping) else headers)}
    retry_after = _retry_after(hdrs)
    try:
        doc: Any = loads(body)
    except JsonTextError:
        doc = None
    message, error_type = f"upstream answered {status}", ERROR_TYPE_BY_STATUS.get(status, "upstream_error")
    items: tuple[DetailItem, ...] = ()
    flat: dict[str, Any] = {}
    if isinstance(doc, dict):
        detail = doc.get("detail")
        if isinstance(detail, tuple):
            items = tuple(_item(d) for d in detail if isinstance(d, dict))
            message = "; ".join(i.msg for i in items) or message
        elif isinstance(detail, dict):
            message = str(detail.get("message", message))
            error_type = str(detail.get("error_type", error_type))
        elif isinstance(detail, str):
            message = detail
        legacy = doc.get("error")
        if isinstance(legacy, dict):
            message = str(legacy.get("message", message))
            flat.update({k: legacy[k] for k in ("code", "question", "state", "reason", "limit") if k in legacy})
        elif isinstance(legacy, str):
            message = legacy
        flat.update({k: doc[k] for k in ("code", "question", "state", "reason", "limit") if k in doc})
    elif body:
        message = body[:200].decode("utf-8", "replace")
    limit = flat.get("limit")
    return ErrorInfo(
        status=status,
        code=str(flat.get("code") or _STATUS_CODE.get(status, "upstream_error")),
        message=message,
        error_type=error_type,
        reason=flat.get("reason"),
        question=flat.get("question"),
        state=flat.get("state"),
        limit=int(limit.value) if isinstance(limit, Number) else None,
        items=items,
        retry_after=retry_after,
        body=body,
    )


def _item(d: Mapping[str, Any]) -> DetailItem:
    ctx = d.get("ctx")
    return DetailItem(
        tuple(d.get("loc", ())),
        str(d.get("msg", "")),
        str(d.get("type", "")),
        dict(ctx) if isinstance(ctx, dict) else None,
    )


def _retry_after(headers: Mapping[str, str]) -> float | None:
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers[name]) * scale
        except (KeyError, ValueError):
            continue
    return None


def upstream_error(status: int, headers: Any, body: bytes) -> UpstreamError:
    return UpstreamError.from_info(decode_error(status, headers, body))  # type: ignore[return-value]  # from_info builds the class it is called on


# ---------------------------------------------------------------------------- answers


def decode_reply(body: bytes | Mapping[str, Any], ir: Request | Batch) -> Reply:
    """An answer in the shape of ``ir``: a response, a batch's responses, or 4.0's per-state arrays."""
    read = loads(body) if isinstance(body, (bytes, bytearray)) else body
    if not isinstance(read, dict):
        raise ProtocolError(
            "the upstream's answer is not a JSON object",
            status=502,
            code="invalid_model_output",
            error_type="upstream_error",
        )
    # Its members are the upstream's to shape; each is read as this wire version defines it.
    doc: Mapping[str, Any] = read
    model = doc.get("model")
    if isinstance(ir, Request):
        return Reply({"": item_result(doc)}, model)
    if ir.form == "requests":
        responses = doc.get("responses") or {}
        return Reply(
            {name: item_result(responses[name]) if name in responses else _unanswered(name) for name in ir.items},
            model,
            doc.get("usage"),
        )
    per_state = {k: v for k, v in doc.items() if k not in ("model", "answers", "usage") and isinstance(v, tuple)}
    answers = doc.get("answers") or ()
    results = {}
    for i, name in enumerate(ir.items):
        if i >= len(answers):
            results[name] = _unanswered(name)
            continue
        extras = JsonObject((k, v[i]) for k, v in per_state.items() if i < len(v))
        results[name] = ItemResult(answers[i], None, extras, model)
    return Reply(results, model, doc.get("usage"))


def item_result(doc: Mapping[str, Any]) -> ItemResult:
    """One request's response: its answers, usage and the response members beside them."""
    extras = JsonObject((k, v) for k, v in doc.items() if k not in ("model", "answers", "usage"))
    return ItemResult(doc.get("answers") or JsonObject(), doc.get("usage"), extras, doc.get("model"))


def _unanswered(name: str) -> ItemResult:
    info = ErrorInfo(
        500,
        "question_failed",
        f"the upstream gave no answer for {name!r}",
        "unknown",
        "invalid_model_output",
        state=name,
    )
    return ItemResult(error=info)


def reply_as_sent(body: bytes, ir: Request | Batch, endpoint: Endpoint, flavour: Flavour) -> bytes | None:
    """What ``reply_doc`` writes for an upstream's reply to one request, when that is the reply
    itself: every question answered, in request order, under ``model``, ``answers`` and
    ``usage`` in that order, nothing to raise or to strip. Then the upstream's text, laid out as
    ``dumpb`` lays it out, is the answer, and its numbers are never read; None otherwise."""
    if flavour == "standard" or not isinstance(ir, Request):
        return None
    doc = read_plain(body)
    if type(doc) is not dict or list(doc)[:3] != ["model", "answers", "usage"]:
        return None
    answers = doc["answers"]
    if (
        type(doc["model"]) is not str
        or not doc["model"]
        or doc["usage"] is None
        or type(answers) is not dict
        or len(answers) < len(ir.questions)
    ):
        return None
    raises = endpoint != "decisions"  # where a failed question fails the request
    for (q_id, question), a_id in zip(ir.questions.items(), answers):
        if a_id != q_id or question.problem is not None:
            return None
        answer = answers[q_id]
        if raises and (answer is None or (type(answer) is dict and "error" in answer)):
            return None
    return dumps_layout(body)


# A vllm-sr/5.0 runtime's word on its /v1/decisions reply that the reply is whole: it answers
# every question of its one request, none with an error, under a model name and with usage, in
# the internal form's layout (model, answers, usage first; json.dumps spacing). A listener for
# which ``takes_whole`` holds answers such a reply with its bytes as they are, so the sidecar can
# let it through without reading it (Envoy then never sends it the body).
WHOLE_REPLY_HEADER = "x-vsr-reply"
WHOLE_REPLY = "whole"


def is_whole(reply: Reply, ir: Request | Batch) -> bool:
    """Whether ``reply`` (a runtime's own answers to ``ir``) is whole: see WHOLE_REPLY_HEADER."""
    if not isinstance(ir, Request):
        return False
    result = reply.items.get("")
    if result is None or result.error is not None or result.usage is None or not (result.model or ir.model):
        return False
    for q_id, question in ir.questions.items():
        answer = result.answers.get(q_id)
        if question.problem is not None or not isinstance(answer, dict) or "error" in answer:
            return False
    return True


def takes_whole(ir: Request | Batch, flavour: Flavour) -> bool:
    """Whether a whole reply to ``ir`` is this listener's answer byte for byte (``reply_as_sent``
    gives it back unchanged): one request, no question with a problem the listener found itself,
    and a flavour that keeps every member the reply has."""
    return flavour != "standard" and isinstance(ir, Request) and all(q.problem is None for q in ir.questions.values())


def reply_doc(reply: Reply, ir: Request | Batch, endpoint: Endpoint, flavour: Flavour) -> JsonObject:
    """The client's answer; on /v1/systemone a failed question raises QuestionFailed instead."""
    inline_errors = endpoint == "decisions"
    names = list(reply.items)
    if not inline_errors:
        for name, request in _requests(ir):
            _raise_first_failure(
                reply.items.get(name) or _unanswered(name), request, name if isinstance(ir, Batch) else None
            )
    docs = {
        name: _response(reply.items.get(name) or _unanswered(name), request, flavour, inline_errors)
        for name, request in _requests(ir)
    }
    model = reply.model or next((d.get("model") for d in docs.values() if d.get("model")), None) or ""
    if isinstance(ir, Request):
        return docs[""]
    usage = (
        reply.usage if reply.usage is not None else _sum_usage(reply.items[n].usage for n in names if n in reply.items)
    )
    if ir.form == "requests":
        return JsonObject([("model", model), ("responses", JsonObject(docs)), ("usage", usage)])
    members: list[tuple[str, Any]] = [
        ("model", model),
        ("answers", tuple(d["answers"] for d in docs.values())),
        ("usage", usage),
    ]
    extra_names = [k for d in docs.values() for k in d if k not in ("model", "answers", "usage")]
    for k in dict.fromkeys(extra_names):
        members.append((k, tuple(d.get(k, JsonObject()) for d in docs.values())))
    return JsonObject(members)


def _requests(ir: Request | Batch) -> Iterable[tuple[str, Request]]:
    return ir.items.items() if isinstance(ir, Batch) else (("", ir),)


def _raise_first_failure(result: ItemResult, request: Request, state: str | None) -> None:
    if result.error is not None:
        raise ProtocolError.from_info(result.error if state is None else replace(result.error, state=state))
    for q_id in request.questions:
        answer = result.answers.get(q_id)
        if answer is None:
            raise QuestionFailed(
                f"the model gave no answer to question {q_id!r}",
                status=500,
                question=q_id,
                state=state,
                reason="invalid_model_output",
            )
        if isinstance(answer, dict) and "error" in answer:
            raise question_error(q_id, answer, state)


def question_error(q_id: str, answer: Mapping[str, Any], state: str | None = None) -> QuestionFailed:
    code = str(answer["error"])
    status = QUESTION_ERROR_STATUS.get(code, 500)
    message = str(answer.get("message") or f"question {q_id!r} cannot be answered: {code}")
    loc: tuple[str | int, ...] = (
        ("body", "questions", q_id) if state is None else ("body", "requests", state, "questions", q_id)
    )
    items = (DetailItem(loc, message, code),) if status == 422 else ()
    reason = answer.get("reason")
    return QuestionFailed(
        message, status=status, question=q_id, state=state, reason=str(reason) if reason else code, items=items
    )


def _response(result: ItemResult, request: Request, flavour: Flavour, inline_errors: bool) -> JsonObject:
    answers = []
    for q_id, q in request.questions.items():
        if result.error is not None and inline_errors:
            answers.append((q_id, _error_answer(q.type, result.error)))
        elif q.problem is not None and inline_errors:
            answers.append((q_id, _error_answer(q.type, q.problem)))
        elif q_id in result.answers:
            answers.append((q_id, _strip(result.answers[q_id], "answer", flavour)))
    for q_id, answer in result.answers.items():  # answers under derived ids (a composite set's labels)
        if q_id not in request.questions:
            answers.append((q_id, _strip(answer, "answer", flavour)))
    members: list[tuple[str, Any]] = [("model", result.model or request.model or ""), ("answers", JsonObject(answers))]
    members.append(("usage", result.usage if result.usage is not None else _sum_usage(())))
    if flavour != "standard":
        members += list(result.extras.items())
    return JsonObject(members)


def _error_answer(kind: str, info: ErrorInfo) -> JsonObject:
    code = (
        info.code if info.code not in ("question_failed", "upstream_error") else (info.reason or "invalid_model_output")
    )
    return JsonObject([("type", kind), ("error", code), ("reason", info.reason or code), ("message", info.message)])


def _strip(answer: Any, level: str, flavour: Flavour) -> Any:
    if flavour != "standard" or not isinstance(answer, dict):
        return answer
    drop = REPLY_EXTENSIONS[level]
    return JsonObject((k, v) for k, v in answer.items() if k not in drop)


def _sum_usage(usages: Iterable[Mapping[str, Any] | None]) -> JsonObject:
    total = {"input_tokens": 0, "output_tokens": 0}
    for usage in usages:
        for k in total:
            value = (usage or {}).get(k)
            if isinstance(value, Number):
                total[k] += int(value.value)
            elif isinstance(value, int):
                total[k] += value
    return JsonObject(total)


# ---------------------------------------------------------------------------- listings


def decode_listing(status: int, body: bytes) -> Listing:
    if status != 200:
        raise upstream_error(status, (), body)
    read = loads(body)
    if not isinstance(read, dict):
        raise ProtocolError(
            "the model listing is not a JSON object", status=502, code="upstream_error", error_type="upstream_error"
        )
    doc: Mapping[str, Any] = read  # the entries are the upstream's to shape, as in decode_reply
    entries = doc.get("models")
    if entries is None and "data" in doc:  # 4.0's listing
        entries = tuple(
            JsonObject([("name", d.get("id", "")), *((k, v) for k, v in d.items() if k != "id")]) for d in doc["data"]
        )
    out = []
    for entry in entries or ():
        standard = {"name", "description", "release_date"}
        out.append(
            ListingItem(
                name=str(entry.get("name", "")),
                description=str(entry.get("description", "")),
                release_date=str(entry.get("release_date", "")),
                extensions=JsonObject(
                    (k, v) for k, v in entry.items() if k not in standard and k in REPLY_EXTENSIONS["listing_item"]
                ),
            )
        )
    return Listing(tuple(out))


def listing_doc(listing: Listing, flavour: Flavour) -> JsonObject:
    models = []
    for item in listing.models:
        entry: list[tuple[str, Any]] = [
            ("name", item.name),
            ("description", item.description),
            ("release_date", item.release_date),
        ]
        if flavour != "standard":
            entry += list(item.extensions.items())
        models.append(JsonObject(entry))
    members: list[tuple[str, Any]] = [("models", tuple(models))]
    if flavour == "legacy":
        data = [
            JsonObject([("id", item.name), ("description", item.description), *item.extensions.items()])
            for item in listing.models
        ]
        members.append(("data", tuple(data)))
    return JsonObject(members)
