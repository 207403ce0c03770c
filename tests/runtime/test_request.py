"""The minimal systemone/0.2 reader and the standard response writer used by `vllm-srun answer`."""

from __future__ import annotations

from typing import Any

import pytest

from sr_runtime.errors import InvalidInput, InvalidQuestion
from sr_runtime.request import error_json, read_request, response_json
from sr_runtime.types import (
    ChoiceAnswer,
    ChoiceQuestion,
    NoulAnswer,
    NoulQuestion,
    QuestionError,
    Result,
    ScoreAnswer,
    ScoreQuestion,
    Usage,
)

SEED_002 = {
    "model": "vllm-sr/vela3-fast",
    "state": {
        "request": "Our export button fails with a 500 since this morning. Open a ticket.",
        "history": "How do I export my invoices as CSV?",
    },
    "roles": {"request": "user", "history": "context"},
    "questions": {
        "team": {
            "type": "choice",
            "instructions": "Which team should handle this request?",
            "criteria": {"billing": "Payments, invoices and refunds", "engineering": "Outages, errors and bugs", "other": "Anything else"},
        },
        "urgent": {"type": "noul", "instructions": "Does the user report a problem that blocks their work?"},
    },
    "options": {"deadline_ms": 1500},
}


def test_seed_002s_request_reads_in_order_and_ignores_unknown_top_level_members() -> None:
    parsed = read_request(SEED_002)
    assert parsed.model == "vllm-sr/vela3-fast"
    assert parsed.ids == ("team", "urgent")
    team, urgent = parsed.request.questions
    assert isinstance(team, ChoiceQuestion) and [name for name, _ in team.options] == ["billing", "engineering", "other"]
    assert urgent == NoulQuestion("Does the user report a problem that blocks their work?")
    assert parsed.request.state == SEED_002["state"]


def test_criteria_forms_the_standard_allows() -> None:
    parsed = read_request({"state": ["a", {"b": 1}], "questions": {
        "one-sided": {"type": "noul", "criteria": {"true": "The user is angry"}},
        "null": {"type": "noul", "instructions": {"ask": "structured"}, "criteria": None},
        "named": {"type": "choice", "criteria": {"x": None, "y": ["structured"]}},
        "levels": {"type": "score", "criteria": ["low", {"level": "high"}]},
    }})
    one_sided, null, named, levels = parsed.request.questions
    assert one_sided == NoulQuestion(None, true="The user is angry")
    assert null == NoulQuestion({"ask": "structured"})
    assert named == ChoiceQuestion((("x", None), ("y", ["structured"])))
    assert levels == ScoreQuestion(("low", {"level": "high"}))


def _question(**fields: Any) -> dict[str, Any]:
    return {"state": "s", "questions": {"q": fields}}


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ([], InvalidInput, "the request must be a JSON object"),
        ({"questions": {"q": {"type": "noul"}}}, InvalidInput, 'the request needs a "state"'),
        ({"state": None, "questions": {"q": {"type": "noul"}}}, InvalidInput, 'the request needs a "state"'),
        ({"state": 3, "questions": {"q": {"type": "noul"}}}, InvalidInput, '"state" must be text'),
        ({"state": "s"}, InvalidInput, 'the request needs "questions"'),
        ({"state": "s", "questions": {}}, InvalidInput, 'the request needs "questions"'),
        ({"state": "s", "questions": {"q": {"type": "noul"}}, "assets": {"<image:1>": {}}}, InvalidInput, "reads text only"),
        (_question(instructions="x"), InvalidQuestion, "question 'q': unknown type None"),
        (_question(type="boolean"), InvalidQuestion, "question 'q': unknown type 'boolean'"),
        (_question(type="box", instructions="dog"), InvalidQuestion, "question 'q': type 'box' is not answered by this runtime"),
        (_question(type="choice", criteria={}), InvalidQuestion, "choice criteria must be a non-empty object"),
        (_question(type="score", criteria={"0": "low", "1": "high"}), InvalidQuestion, "the map form is not accepted"),
        (_question(type="score", criteria=["low", None]), InvalidQuestion, "never null"),
        (_question(type="noul", criteria={"maybe": "x"}), InvalidQuestion, 'noul criteria must be an object with "true"'),
        (_question(type="noul", preset="pii"), InvalidQuestion, "question 'q': unknown member 'preset'"),
    ],
)
def test_malformed_requests_are_refused_with_a_named_reason(body: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_request(body)


def test_the_response_is_the_standard_envelope() -> None:
    result = Result(
        (
            ChoiceAnswer("b", (("a", 0.25), ("b", 0.75)), 0.5),
            NoulAnswer(0.88),
            ScoreAnswer(1.5, (0.1, 0.3, 0.6), 0.4, ("low", "mid", "high")),
        ),
        Usage(input_tokens=212),
    )
    assert response_json("m", ("team", "urgent", "anger"), result) == {
        "model": "m",
        "answers": {
            "team": {"type": "choice", "choice": "b", "probabilities": {"a": 0.25, "b": 0.75}, "confidence": 0.5},
            "urgent": {"type": "noul", "noul": 0.88},
            "anger": {
                "type": "score", "score": 1.5, "legend": {"0": "low", "1": "mid", "2": "high"},
                "probabilities": {"0": 0.1, "1": 0.3, "2": 0.6}, "confidence": 0.4,
            },
        },
        "usage": {"input_tokens": 212, "output_tokens": 0},
    }


def test_a_question_error_names_the_question() -> None:
    body = error_json("team", QuestionError("max_length_exceeded", "too long"))
    assert body == {
        "detail": [{"loc": ["body", "questions", "team"], "msg": "too long", "type": "max_length_exceeded"}],
        "code": "question_failed", "question": "team", "reason": "max_length_exceeded",
    }
