"""Spec-driven checks: every field the specs define is read and answered as its level says.

The cases are generated from the field tables, so a field added to a spec is checked here
without a new test.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from systemone import REGISTRY, ProtocolError, Target
from systemone.fieldtypes import parse
from systemone.generated.fields import EXTENSION_FIELDS, EXTENSION_QUESTION_TYPES, STANDARD_QUESTIONS
from systemone.generated.strip import REFUSE, REPLY_EXTENSIONS, STRIP

V50, V40, V02 = (REGISTRY.listener(s) for s in ("vllm-sr/5.0", "vllm-sr/4.0", "systemone/0.2"))
C02 = REGISTRY.client("systemone/0.2")


def example(type_expr: str, bounds: dict[str, Any]) -> Any:
    """A valid value of a spec type."""
    t = parse(type_expr)
    if t.kind == "enum":
        return t.choices[0]
    if t.kind in ("integer", "number"):
        low = bounds.get("minimum", bounds.get("exclusive_minimum", 0))
        return max(1, int(low)) if t.kind == "integer" else (low + 0.5 if "exclusive_minimum" in bounds else low)
    if t.kind == "boolean":
        return True
    if t.kind == "array":
        return ["request"]
    if t.kind in ("map", "object"):
        return (
            {"request": example(str(t.item), {})}
            if t.kind == "map" and t.item is not None and t.item.kind == "enum"
            else {}
        )
    return "x"


def criteria_for(kind: str) -> Any:
    if kind == "noul":
        return None  # optional
    spec = STANDARD_QUESTIONS.get(kind, {}).get("criteria") or (EXTENSION_QUESTION_TYPES.get(kind) or {}).get(
        "criteria"
    )
    if spec is None:
        return None
    return ["low", "high"] if spec[0].startswith("array") else {"a": None, "b": None}


def request_with(level: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "model": "d3",
        "state": {"request": "hi"},
        "questions": {"q": {"type": "noul", "instructions": "?"}},
    }
    value = example(spec["type"], spec["bounds"])
    if level == "request":
        doc[name] = value
    elif level == "options":
        doc["options"] = {name: value}
    else:
        kind = (spec["question_types"] or ("noul",))[0]
        q: dict[str, Any] = {"type": kind, "instructions": "?", name: value}
        if criteria_for(kind) is not None:
            q["criteria"] = criteria_for(kind)
        doc["questions"] = {"q": q}
    return doc


REQUEST_FIELDS = [(k, v) for k, v in EXTENSION_FIELDS.items() if k.split(".")[0] in ("request", "options", "question")]


@pytest.mark.parametrize(("key", "spec"), REQUEST_FIELDS, ids=[k for k, _ in REQUEST_FIELDS])
def test_each_request_extension_field_is_read_by_5_0_and_4_0_and_refused_by_the_bare_standard(
    key: str, spec: dict[str, Any]
) -> None:
    level, name = key.split(".")
    body = json.dumps(request_with(level, name, spec)).encode()
    for codec in (V50, V40):
        req = codec.read("/v1/systemone", body)
        assert req.plan.body  # read, planned
    with pytest.raises(ProtocolError) as caught:
        V02.read("/v1/systemone", body)
    if (spec["question_types"] or ("noul",))[0] not in STANDARD_QUESTIONS:
        assert caught.value.info.status == 422  # the question type itself is not the standard's
    else:
        assert (
            caught.value.info.status == 400 and (name if level != "options" else "options") in caught.value.info.message
        )


@pytest.mark.parametrize(("key", "spec"), REQUEST_FIELDS, ids=[k for k, _ in REQUEST_FIELDS])
def test_each_request_extension_field_is_stripped_expanded_or_refused_for_a_0_2_target(
    key: str, spec: dict[str, Any]
) -> None:
    level, name = key.split(".")
    req = V50.read("/v1/systemone", json.dumps(request_with(level, name, spec)).encode())
    kind = next(iter(req.ir.questions.values())).type
    if name in REFUSE.get(level, ()) or kind in REFUSE["question_type"]:
        with pytest.raises(ProtocolError):
            C02.plan(req.ir, Target())
        return
    assert name in STRIP.get(level, ()) or level == "options"
    (call,) = C02.plan(req.ir, Target()).calls
    sent = json.loads(call.body)
    assert name not in sent and name not in sent["questions"]["q"] and "options" not in sent


def test_each_question_type_of_the_extension_set_is_refused_by_the_bare_standard_and_read_by_5_0() -> None:
    for kind in EXTENSION_QUESTION_TYPES:
        q: dict[str, Any] = {"type": kind, "instructions": "?"}
        if criteria_for(kind) is not None:
            q["criteria"] = criteria_for(kind)
        body = json.dumps({"model": "d3", "state": "x", "questions": {"q": q}}).encode()
        assert V50.read("/v1/systemone", body).ir.questions["q"].type == kind
        with pytest.raises(ProtocolError) as caught:
            V02.read("/v1/systemone", body)
        assert caught.value.info.status == 422 and caught.value.info.items[0].type == "union_tag_invalid"


REPLY_CASES = [(level, name) for level in ("answer", "response") for name in REPLY_EXTENSIONS[level]]


@pytest.mark.parametrize(("level", "name"), REPLY_CASES, ids=[f"{lv}.{n}" for lv, n in REPLY_CASES])
def test_each_reply_extension_member_reaches_5_0_clients_and_not_bare_standard_ones(level: str, name: str) -> None:
    body = json.dumps({"model": "d3", "state": "x", "questions": {"q": {"type": "noul"}}}).encode()
    answer: dict[str, Any] = {"type": "noul", "noul": 0.5}
    reply: dict[str, Any] = {"model": "d3", "answers": {"q": answer}, "usage": {"input_tokens": 1, "output_tokens": 0}}
    value = {"q": 1} if level == "response" else "v"
    if level == "answer":
        if name == "error":
            return  # an answer with an error is a failed question, checked in test_listener
        answer[name] = value
    else:
        reply[name] = value
    for codec, kept in ((V50, True), (V02, False)):
        out = json.loads(codec.answer_success(codec.read("/v1/systemone", body), json.dumps(reply).encode()))
        where = out["answers"]["q"] if level == "answer" else out
        assert (name in where) is kept
