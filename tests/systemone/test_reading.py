"""Reading rules (issue #3, item 4), checked through the listener codecs as a client sees them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from systemone import REGISTRY, ProtocolError
from systemone.errors import MAX_BODY_BYTES
from systemone.generated.fields import EXTENSION_FIELDS, LEGACY_FORMS, LIMITS, STANDARD_QUESTIONS
from tests.systemone.inputs import corpus

V50, V40, V02 = (REGISTRY.listener(s) for s in ("vllm-sr/5.0", "vllm-sr/4.0", "systemone/0.2"))


def body(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode()


def refusal(codec, doc: dict[str, Any] | bytes, path: str = "/v1/systemone") -> tuple[int, dict[str, Any]]:
    with pytest.raises(ProtocolError) as caught:
        codec.read(path, doc if isinstance(doc, bytes) else body(doc), {})
    answer = codec.answer_error(caught.value)
    return answer.status, json.loads(answer.body)


def request(**questions: Any) -> dict[str, Any]:
    return {"model": "d3", "state": "Our export button fails with a 500.", "questions": questions}


def test_unknown_members_anywhere_are_refused_with_400_naming_each_one() -> None:
    doc = request(q={"type": "noul", "instructions": "x", "temperature": 0})
    doc["stream"] = True
    status, error = refusal(V50, doc)
    assert status == 400 and error["code"] == "invalid_request" and error["reason"] == "unknown_member"
    assert "stream" in error["detail"]["message"] and "questions.q.temperature" in error["detail"]["message"]


def test_a_field_of_another_question_type_is_named_with_why() -> None:
    status, error = refusal(V50, request(q={"type": "noul", "instructions": "x", "threshold": 0.5}))
    assert status == 400 and "questions.q.threshold (noul questions take no threshold)" in error["detail"]["message"]


def test_the_bare_standard_ignores_unknown_members_but_refuses_extension_fields() -> None:
    plain = request(q={"type": "noul", "instructions": "x"})
    plain["x_trace"] = "t1"
    assert V02.read("/v1/systemone", body(plain)).ir.questions["q"].type == "noul"
    plain["roles"] = {}
    status, error = refusal(V02, plain)
    assert status == 400 and "roles" in error["detail"]["message"]
    assert set(error) == {"detail"}  # the bare standard: no vllm-sr flat fields


LIMIT_CASES = [
    ("choice", "criteria", LIMITS["choice_options"]["min"], LIMITS["choice_options"]["max"]),
    ("score", "criteria", LIMITS["score_levels"]["min"], LIMITS["score_levels"]["max"]),
    ("set", "criteria", 1, 255),
    ("span", "criteria", 1, 255),
]


def criteria(kind: str, n: int) -> Any:
    return [f"level {i}" for i in range(n)] if kind == "score" else {f"opt {i}": None for i in range(n)}


@pytest.mark.parametrize(("kind", "member", "low", "high"), LIMIT_CASES)
def test_option_label_and_level_limits_are_accepted_at_the_bounds_and_refused_past_them(
    kind: str, member: str, low: int, high: int
) -> None:
    for n in (low, high):
        V50.read("/v1/systemone", body(request(q={"type": kind, member: criteria(kind, n)})))
    for n, limit in ((low - 1, low), (high + 1, high)):
        if n < 1 and kind in ("set", "span"):
            n = 0
        status, error = refusal(V50, request(q={"type": kind, member: criteria(kind, n)}))
        assert status == 422 and error["question"] == "q" and error["limit"] == limit
        (item,) = error["detail"]
        assert item["loc"] == ["body", "questions", "q", kind, "criteria"] and item["type"] in ("too_short", "too_long")


def test_the_standard_bounds_come_from_the_spec() -> None:
    assert STANDARD_QUESTIONS["choice"]["criteria"][2] == {"min_items": 2, "max_items": 255}
    assert STANDARD_QUESTIONS["score"]["criteria"][2] == {"min_items": 2, "max_items": 10}


def test_a_body_over_32_mib_gets_413() -> None:
    status, error = refusal(V50, b" " * (MAX_BODY_BYTES + 1))
    assert status == 413 and error["code"] == "request_too_large" and error["limit"] == MAX_BODY_BYTES


def test_422_lists_one_located_entry_per_failed_question() -> None:
    status, error = refusal(
        V50,
        request(
            a={"type": "choice", "criteria": {"x": None}},
            b={"type": "score", "criteria": {"0": "low"}},
            c={"type": "boolean"},
        ),
    )
    assert status == 422
    locs = [tuple(item["loc"]) for item in error["detail"]]
    assert locs == [
        ("body", "questions", "a", "choice", "criteria"),
        ("body", "questions", "b", "score", "criteria"),
        ("body", "questions", "c", "type"),
    ]
    assert "question" not in error  # several questions failed


@pytest.mark.parametrize(
    ("doc", "loc"),
    [
        ({"questions": {"q": {"type": "noul"}}}, ["body", "state"]),
        ({"state": "x"}, ["body", "questions"]),
        ({"state": "x", "questions": {}}, ["body", "questions"]),
        ({"state": None, "questions": {"q": {"type": "noul"}}}, ["body", "state"]),
        ({"state": "x", "questions": {"q": {"instructions": "x"}}}, ["body", "questions", "q"]),
    ],
)
def test_invalid_requests_get_422_in_the_standard_shape(doc: dict[str, Any], loc: list[Any]) -> None:
    status, error = refusal(V50, doc)
    assert status == 422 and error["detail"][0]["loc"] == loc


def test_text_that_is_not_json_gets_422_json_invalid() -> None:
    status, error = refusal(V50, b'{"state": ')
    assert status == 422 and error["detail"][0]["type"] == "json_invalid"


def test_a_deadline_longer_than_any_wait_is_accepted_and_capped() -> None:
    """The schemas set no maximum on deadline_ms; a 400-digit one overflowed float arithmetic."""
    doc = {"state": "x", "questions": {"q": {"type": "noul", "instructions": "a"}}, "options": {"deadline_ms": 10**400}}
    req = V50.read("/v1/systemone", json.dumps(doc).encode(), [])
    assert req.ir.deadline_ms == 2**31 - 1 and req.ir.deadline_ms / 1000 > 86400


def test_json_nested_past_the_readers_depth_gets_422_json_invalid() -> None:
    """The reader recurses per level: nesting past Python's limit was a RecursionError (a 500)."""
    deep = b"[" * 5000 + b"]" * 5000
    status, error = refusal(
        V50, b'{"state": "x", "questions": {"q": {"type": "noul", "instructions": "a"}}, "x": ' + deep + b"}"
    )
    assert status == 422 and error["detail"][0]["type"] == "json_invalid"
    assert "too deeply" in error["detail"][0]["msg"]


# ---------------------------------------------------------------------------- 4.0 forms

LEGACY = [(name.split("/", 1)[1], text) for name, text in corpus() if name.startswith("legacy/")]


@pytest.mark.parametrize(("form", "text"), LEGACY, ids=[f for f, _ in LEGACY])
def test_each_4_0_form_is_accepted_and_counted_on_a_4_0_listener(form: str, text: bytes) -> None:
    req = V40.read("/v1/systemone", text)
    assert form in req.legacy_forms
    assert req.plan.kind == "passthrough" and req.plan.body == text


OVERLAPS = ("implicit_roles", "media_array")  # valid 5.0 requests that 4.0 reads its own way


@pytest.mark.parametrize(
    ("form", "text"), [(f, t) for f, t in LEGACY if f not in OVERLAPS], ids=[f for f, _ in LEGACY if f not in OVERLAPS]
)
def test_each_4_0_only_form_is_refused_on_a_5_0_listener(form: str, text: bytes) -> None:
    status, error = refusal(V50, text)
    assert status in (400, 422), (form, error)


def test_the_two_overlaps_keep_their_4_0_reading_on_a_4_0_listener() -> None:
    doc = {
        "state": ["<img>", {"request": "what is this?"}],
        "assets": {"<img>": {"type": "image", "format": "png", "data_base64": "AA=="}},
        "questions": {"q": {"type": "noul"}},
    }
    on40, on50 = V40.read("/v1/systemone", body(doc)), V50.read("/v1/systemone", body(doc))
    assert on40.ir.state == ("<img>", {"request": "what is this?"}) and on40.ir.media == ()
    assert on50.ir.state == {"request": "what is this?"} and on50.ir.media == ("<img>",)
    assert "media_array" in on40.legacy_forms
    obj = {"state": {"request": "hi", "history": "earlier"}, "questions": {"q": {"type": "noul"}}}
    assert V40.read("/v1/systemone", body(obj)).ir.roles.of(obj["state"]) == {"request": "user", "history": "context"}
    assert V50.read("/v1/systemone", body(obj)).ir.roles.of(obj["state"]) == {"request": "user", "history": "user"}


def test_the_5_0_media_rule_needs_exactly_one_other_element_after_the_media() -> None:
    assets = {
        "<i>": {"format": "png", "data_base64": "AA=="},
        "<v>": {"type": "video", "format": "mp4", "data_base64": "AA=="},
    }
    two = V50.read(
        "/v1/systemone", body({"state": ["<i>", "a", "b"], "assets": assets, "questions": {"q": {"type": "noul"}}})
    )
    assert two.ir.media == () and two.ir.state == ("<i>", "a", "b")
    wrong_order = V50.read(
        "/v1/systemone", body({"state": ["<v>", "<i>", "a"], "assets": assets, "questions": {"q": {"type": "noul"}}})
    )
    assert wrong_order.ir.media == ()


def test_every_legacy_form_has_a_corpus_example() -> None:
    assert sorted(f for f, _ in LEGACY) == sorted(LEGACY_FORMS)


def test_a_preset_alone_is_a_4_0_form() -> None:
    doc = request(jb={"type": "noul", "preset": "jailbreak"})
    status, error = refusal(V50, doc)
    assert status == 422 and error["detail"][0]["loc"][-1] == "preset"
    assert V40.read("/v1/systemone", body(doc)).legacy_forms == ("preset_only",)
    status, error = refusal(V40, request(x={"type": "choice", "preset": "pii"}))
    assert status == 422 and "span question" in error["detail"][0]["msg"]


def test_roles_must_name_keys_of_an_object_state() -> None:
    status, error = refusal(
        V50, {"state": {"request": "hi"}, "roles": {"history": "context"}, "questions": {"q": {"type": "noul"}}}
    )
    assert status == 422 and error["detail"][0]["loc"] == ["body", "roles", "history"]


def test_extension_field_values_are_checked_against_the_generated_table() -> None:
    assert EXTENSION_FIELDS["question.threshold"]["bounds"] == {"minimum": 0, "maximum": 1}
    status, error = refusal(V50, request(t={"type": "set", "criteria": {"a": None}, "threshold": 1.5}))
    assert status == 422 and error["detail"][0]["type"] == "less_than_equal"
    status, error = refusal(V50, {"state": "x", "questions": {"q": {"type": "noul"}}, "options": {"deadline_ms": 0.5}})
    assert status == 422 and error["detail"][0]["loc"] == ["body", "options", "deadline_ms"]


# ---------------------------------------------------------------------------- endpoints


def test_the_batch_endpoint_reads_named_whole_requests() -> None:
    doc = {
        "model": "d3",
        "requests": {
            "doc_1": request(r={"type": "noul"}),
            "doc_2": {"state": "y", "questions": {"r": {"type": "noul"}}},
        },
        "options": {"deadline_ms": 3000},
    }
    req = V50.read("/v1/systemone/batch", body(doc))
    assert list(req.ir.items) == ["doc_1", "doc_2"] and req.ir.deadline_ms == 3000 and req.plan.kind == "convert"
    status, error = refusal(V50, {"requests": doc["requests"]}, "/v1/systemone")
    assert status == 400 and "requests" in error["detail"]["message"]


def test_decisions_keeps_a_failed_question_and_refuses_only_a_request_with_none_valid() -> None:
    req = V50.read(
        "/v1/decisions", body(request(good={"type": "noul"}, bad={"type": "choice", "criteria": {"a": None}}))
    )
    assert req.plan.kind == "passthrough"
    assert req.ir.questions["good"].problem is None and req.ir.questions["bad"].problem.code == "invalid_question"
    status, error = refusal(V50, request(bad={"type": "choice", "criteria": {"a": None}}), "/v1/decisions")
    assert status == 400 and error["reason"] == "no_valid_question" and "bad:" in error["detail"]["message"]


def test_a_path_the_listener_does_not_serve_is_404_naming_the_schema() -> None:
    status, error = refusal(V02, request(q={"type": "noul"}), "/v1/systemone/batch")
    assert status == 404 and "systemone/0.2 serves no /v1/systemone/batch" in error["detail"]["message"]
