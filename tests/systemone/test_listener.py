"""Golden tests of the listener codecs: what a client of each schema reads back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jevcompat import validate
from jevcompat.client import Response
from typesafe_sdk._core.config import Config
from typesafe_sdk._core.endpoints import prepare_system_one
from typesafe_sdk._core.errors import extract_message
from typesafe_sdk._core.question_types import Choice, Noul, Score
from typesafe_sdk._schemas import models as wire

from systemone import REGISTRY, ProtocolError, QuestionFailed, RequestTooLarge

V50, V40, V02 = (REGISTRY.listener(s) for s in ("vllm-sr/5.0", "vllm-sr/4.0", "systemone/0.2"))

REQUEST = {
    "model": "d3",
    "state": {"request": "Our export button fails with a 500.", "history": "How do I export invoices?"},
    "questions": {
        "team": {
            "type": "choice",
            "instructions": "Which team?",
            "criteria": {"billing": "Payments", "engineering": None},
        },
        "urgent": {"type": "noul", "instructions": "Is it blocking?"},
        "anger": {"type": "score", "criteria": ["calm", "annoyed", "angry"]},
    },
}
ANSWERS = {
    "team": {
        "type": "choice",
        "choice": "engineering",
        "probabilities": {"billing": 0.07, "engineering": 0.93},
        "confidence": 0.86,
    },
    "urgent": {"type": "noul", "noul": 0.88, "abstain_probability": 0.01},
    "anger": {
        "type": "score",
        "score": 1.1,
        "legend": {"0": "calm", "1": "annoyed", "2": "angry"},
        "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3},
        "confidence": 0.25,
    },
}
REPLY = {"model": "d3-turbo", "answers": ANSWERS, "usage": {"input_tokens": 212, "output_tokens": 0}, "meta": {"ms": 7}}


def b(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode()


def response(answer) -> Response:  # type: ignore[no-untyped-def]
    return Response(answer.status, dict(answer.headers), answer.body, 0.0, json.loads(answer.body))


# ---------------------------------------------------------------------------- success


def test_5_0_answer_is_the_standard_response_plus_extension_members() -> None:
    req = V50.read("/v1/systemone", b(REQUEST))
    out = json.loads(V50.answer_success(req, b(REPLY)))
    assert out == REPLY
    assert list(out["answers"]) == ["team", "urgent", "anger"]
    wire.SystemOneResponse.model_validate(out)  # the official SDK's wire model reads it
    violations = validate.validate_success(
        REQUEST, Response(200, {"content-type": "application/json"}, b(out), 0.0, out)
    )
    # Unprefixed extension members are the one SHOULD vllm-sr/5.0 departs from (docs/systemone/decisions.md).
    assert {v.req for v in violations} == {"response.extensions"}


def test_strict_0_2_answer_has_only_standard_members_and_passes_jevcompat() -> None:
    req = V02.read("/v1/systemone", b(REQUEST))
    body = V02.answer_success(req, b(REPLY))
    out = json.loads(body)
    assert set(out) == {"model", "answers", "usage"} and "abstain_probability" not in out["answers"]["urgent"]
    assert validate.validate_success(REQUEST, Response(200, {"content-type": "application/json"}, body, 0.0, out)) == []


def test_on_systemone_the_first_failed_question_in_request_order_fails_the_request() -> None:
    req = V50.read("/v1/systemone", b(REQUEST))
    failed = {
        **ANSWERS,
        "urgent": {"type": "noul", "error": "deadline_exceeded", "reason": "deadline_exceeded", "message": "too slow"},
        "anger": {
            "type": "score",
            "error": "invalid_question",
            "reason": "question_malformed",
            "message": 'question "anger" cannot be answered',
        },
    }
    with pytest.raises(QuestionFailed) as caught:
        V50.answer_success(req, b({**REPLY, "answers": failed}))
    answer = V50.answer_error(caught.value, req)
    assert answer.status == 504
    assert json.loads(answer.body) == {
        "detail": {"error_type": "timeout", "message": "too slow"},
        "code": "question_failed",
        "question": "urgent",
        "reason": "deadline_exceeded",
    }


def test_a_422_question_failure_locates_the_question_in_detail() -> None:
    req = V50.read("/v1/systemone", b(REQUEST))
    bad = {
        **ANSWERS,
        "team": {
            "type": "choice",
            "error": "invalid_question",
            "reason": "question_malformed",
            "message": 'question "team" cannot be answered: the question is malformed',
        },
    }
    with pytest.raises(QuestionFailed) as caught:
        V50.answer_success(req, b({**REPLY, "answers": bad}))
    answer = V50.answer_error(caught.value, req)
    assert answer.status == 422
    assert answer.body == (
        b'{"detail": [{"loc": ["body", "questions", "team"], "msg": "question \\"team\\" cannot be answered: '
        b'the question is malformed", "type": "invalid_question"}], "code": "question_failed", "question": '
        b'"team", "reason": "question_malformed"}'
    )
    assert validate.validate_validation_error(response(answer)) == []


def test_decisions_answers_failed_questions_inline_in_a_200() -> None:
    doc = {**REQUEST, "questions": {**REQUEST["questions"], "bad": {"type": "choice", "criteria": {"only": None}}}}
    req = V50.read("/v1/decisions", b(doc))
    out = json.loads(V50.answer_success(req, b(REPLY)))
    assert out["answers"]["bad"]["error"] == "invalid_question" and out["answers"]["bad"]["type"] == "choice"
    assert list(out["answers"]) == ["team", "urgent", "anger", "bad"]


def test_a_batch_is_answered_per_request_and_one_failure_fails_it_naming_the_request() -> None:
    batch = {"requests": {"doc_1": REQUEST, "doc_2": {**REQUEST, "model": "d3"}}}
    req = V50.read("/v1/systemone/batch", b(batch))
    reply = {
        "model": "d3",
        "responses": {"doc_1": REPLY, "doc_2": REPLY},
        "usage": {"input_tokens": 424, "output_tokens": 0},
    }
    out = json.loads(V50.answer_success(req, b(reply)))
    assert list(out) == ["model", "responses", "usage"] and out["responses"]["doc_2"] == REPLY
    assert out["usage"] == {"input_tokens": 424, "output_tokens": 0}
    broken = {
        **reply,
        "responses": {
            "doc_1": REPLY,
            "doc_2": {
                **REPLY,
                "answers": {**ANSWERS, "team": {"type": "choice", "error": "unavailable", "message": "warming up"}},
            },
        },
    }
    with pytest.raises(QuestionFailed) as caught:
        V50.answer_success(req, b(broken))
    error = json.loads(V50.answer_error(caught.value, req).body)
    assert (error["state"], error["question"]) == ("doc_2", "team")


def test_a_4_0_states_request_is_answered_with_one_entry_per_state() -> None:
    doc = {
        "states": ["refund please", "where is my order?"],
        "questions": {"refund": {"type": "noul", "instructions": "Refund?"}},
    }
    req = V40.read("/v1/systemone", b(doc))
    reply = {
        "model": "d3",
        "answers": [{"refund": {"type": "noul", "noul": 0.9}}, {"refund": {"type": "noul", "noul": 0.1}}],
        "usage": {"input_tokens": 20, "output_tokens": 0},
    }
    assert V40.answer_success(req, b(reply)) == (
        b'{"model": "d3", "answers": [{"refund": {"type": "noul", "noul": 0.9}}, {"refund": {"type": "noul", '
        b'"noul": 0.1}}], "usage": {"input_tokens": 20, "output_tokens": 0}}'
    )


# ---------------------------------------------------------------------------- errors


def test_error_bodies_per_listener_schema() -> None:
    error = RequestTooLarge(40_000_000)
    assert json.loads(V02.answer_error(error).body) == {
        "detail": {
            "error_type": "api_usage_error",
            "message": "the body is 40000000 bytes; the limit is 33554432 bytes (32 MiB)",
        }
    }
    v50 = json.loads(V50.answer_error(error).body)
    assert v50 == {
        **json.loads(V02.answer_error(error).body),
        "code": "request_too_large",
        "reason": "body_too_large",
        "limit": 33554432,
    }
    v40 = json.loads(V40.answer_error(error).body)
    assert v40 == {
        **v50,
        "error": {
            "code": "request_too_large",
            "message": "the body is 40000000 bytes; the limit is 33554432 bytes (32 MiB)",
            "reason": "body_too_large",
            "limit": 33554432,
        },
    }
    for codec in (V02, V50, V40):
        answer = codec.answer_error(error)
        assert answer.status == 413 and validate.validate_error_shape(response(answer)) == []
        assert (
            extract_message(json.loads(answer.body))
            == "the body is 40000000 bytes; the limit is 33554432 bytes (32 MiB)"
        )


def test_a_4_0_states_error_names_the_state_by_index_in_its_error_object() -> None:
    doc = {"states": ["a", "b"], "questions": {"q": {"type": "noul"}}}
    req = V40.read("/v1/systemone", b(doc))
    reply = {
        "model": "d3",
        "answers": [
            {"q": {"type": "noul", "noul": 0.5}},
            {"q": {"type": "noul", "error": "invalid_input", "message": "unreadable"}},
        ],
        "usage": {"input_tokens": 1, "output_tokens": 0},
    }
    with pytest.raises(ProtocolError) as caught:
        V40.answer_success(req, b(reply))
    body = json.loads(V40.answer_error(caught.value, req).body)
    assert body["state"] == "1" and body["error"]["state"] == 1 and body["error"]["question"] == "q"


def test_busy_upstream_errors_keep_their_retry_after() -> None:
    req = V50.read("/v1/systemone", b(REQUEST))
    answer = V50.answer_upstream_error(
        req, 529, {"retry-after-ms": "250"}, b'{"detail": {"error_type": "overloaded_error", "message": "busy"}}'
    )
    assert (
        answer.status == 529 and ("retry-after", "1") in answer.headers and ("retry-after-ms", "250") in answer.headers
    )
    assert json.loads(answer.body)["detail"] == {"error_type": "overloaded_error", "message": "busy"}


# ---------------------------------------------------------------------------- listings

LISTING = {
    "models": [
        {
            "name": "d3",
            "description": "Decision 3.0",
            "release_date": "2026-09-15",
            "version": "5.0",
            "features": ["noul", "choice"],
            "card": {"presets": ["pii"]},
        }
    ]
}


def test_listing_per_listener_schema() -> None:
    assert json.loads(V50.answer_listing(b(LISTING))) == LISTING
    standard = json.loads(V02.answer_listing(b(LISTING)))
    assert standard == {"models": [{"name": "d3", "description": "Decision 3.0", "release_date": "2026-09-15"}]}
    wire.ModelMetadataList.model_validate(standard)
    legacy = json.loads(V40.answer_listing(b(LISTING)))
    assert legacy["models"] == LISTING["models"]
    assert legacy["data"] == [
        {
            "id": "d3",
            "description": "Decision 3.0",
            "version": "5.0",
            "features": ["noul", "choice"],
            "card": {"presets": ["pii"]},
        }
    ]


# ---------------------------------------------------------------------------- plans


def test_plans_passthrough_only_what_the_internal_form_reads_as_the_listener_did() -> None:
    text = b(REQUEST)
    assert V40.read("/v1/systemone", text).plan.kind == "passthrough"
    assert V50.read("/v1/systemone", text).plan.kind == "convert"
    assert V50.read("/v1/decisions", text).plan.body == text
    long = V40.read("/v1/systemone", text, {"TypeSafe-Danger-Zone-Long-Context": "true"})
    assert long.plan.kind == "convert" and json.loads(long.plan.body)["options"] == {"long_context": True}
    assert V50.read("/v1/systemone", text).plan.body == (
        b'{"model": "d3", "state": {"request": "Our export button fails with a 500.", "history": "How do I '
        b'export invoices?"}, "questions": {"team": {"type": "choice", "instructions": "Which team?", '
        b'"criteria": {"billing": "Payments", "engineering": null}}, "urgent": {"type": "noul", '
        b'"instructions": "Is it blocking?"}, "anger": {"type": "score", "criteria": ["calm", "annoyed", '
        b'"angry"]}}, "roles": null}'
    )


def test_the_official_sdk_request_is_read_by_standard_and_5_0_listeners() -> None:
    config = Config.resolve("k-test", "http://127.0.0.1:1", None, None, None, None)
    questions = {
        "refund": Noul(instructions="Does the user ask for a refund?"),
        "team": Choice(criteria={"billing": "Payments", "tech": None}),
        "tone": Score(criteria=["calm", "angry"]),
    }
    request, _ = prepare_system_one(
        config, {"message": "refund please"}, questions, None, None, None, None, wire.SystemOneResponse
    )
    for codec in (V02, V50):
        req = codec.read("/v1/systemone", request.content)
        assert list(req.ir.questions) == ["refund", "team", "tone"] and req.ir.model == "jev-latest"
