"""One request read by the protocol layer's codec into the engine's types, and answered back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sr_runtime.request import read_request
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
from systemone import ProtocolError
from tests.conftest import ROOT

# Seed 002's request, as the docs show it, with the model it names.
SEED_002 = json.loads((ROOT / "examples" / "requests" / "seed-002-request.json").read_text()) | {
    "model": "vllm-sr/vela3-fast"
}


def test_seed_002s_request_reads_in_order_with_its_roles() -> None:
    parsed = read_request(SEED_002)
    assert parsed.model == "vllm-sr/vela3-fast"
    assert parsed.ids == ("team", "urgent")
    team, urgent = parsed.request.questions
    assert isinstance(team, ChoiceQuestion) and [name for name, _ in team.options] == [
        "billing",
        "engineering",
        "other",
    ]
    assert urgent == NoulQuestion("Does the user report a problem that blocks their work?")
    assert parsed.request.state == SEED_002["state"]
    assert parsed.request.roles == {"request": "user", "history": "context"}


def test_without_roles_the_whole_state_is_the_users() -> None:
    parsed = read_request({"state": {"a": "x", "b": 1.50}, "questions": {"q": {"type": "noul"}}})
    assert parsed.request.roles is None
    assert parsed.request.state == {"a": "x", "b": 1.5}  # plain values: read as a Python server reads them


def test_criteria_forms_the_standard_allows() -> None:
    parsed = read_request(
        {
            "state": ["a", {"b": 1}],
            "questions": {
                "one-sided": {"type": "noul", "criteria": {"true": "The user is angry"}},
                "null": {"type": "noul", "instructions": {"ask": "structured"}, "criteria": None},
                "named": {"type": "choice", "criteria": {"x": None, "y": ["structured"]}},
                "levels": {"type": "score", "criteria": ["low", {"level": "high"}]},
            },
        }
    )
    one_sided, null, named, levels = parsed.request.questions
    assert one_sided == NoulQuestion(None, true="The user is angry")
    assert null == NoulQuestion({"ask": "structured"})
    assert named == ChoiceQuestion((("x", None), ("y", ["structured"])))
    assert levels == ScoreQuestion(("low", {"level": "high"}))


def _question(**fields: Any) -> dict[str, Any]:
    return {"state": "s", "questions": {"q": fields}}


@pytest.mark.parametrize(
    ("body", "status", "code", "message"),
    [
        ({"questions": {"q": {"type": "noul"}}}, 422, "invalid_request", "state: Field required"),
        ({"state": None, "questions": {"q": {"type": "noul"}}}, 422, "invalid_request", "state"),
        ({"state": "s", "questions": {}}, 422, "invalid_request", "questions"),
        (_question(type="boolean"), 422, "invalid_request", "does not match any of the expected tags"),
        (_question(type="choice", criteria={}), 422, "invalid_request", "criteria"),
        (
            _question(type="score", criteria={"0": "low", "1": "high"}),
            422,
            "invalid_request",
            "the map form is not accepted",
        ),
        (
            {"state": "s", "questions": {"q": {"type": "noul"}}, "x_trace": 1},
            400,
            "invalid_request",
            "does not define this member: x_trace",
        ),
        (
            _question(type="box", instructions="dog"),
            422,
            "question_failed",
            "this model answers noul, choice, score questions, not box",
        ),
    ],
)
def test_malformed_requests_get_the_error_a_client_would(body: Any, status: int, code: str, message: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        read_request(body)
    assert (caught.value.info.status, caught.value.info.code) == (status, code)
    assert message in caught.value.info.message


def test_the_response_is_the_standard_envelope() -> None:
    parsed = read_request(
        {
            "state": "s",
            "questions": {
                "team": {"type": "choice", "criteria": {"a": None, "b": None}},
                "urgent": {"type": "noul"},
                "anger": {"type": "score", "criteria": ["low", "mid", "high"]},
            },
        }
    )
    result = Result(
        (
            ChoiceAnswer("b", (("a", 0.25), ("b", 0.75)), 0.5),
            NoulAnswer(0.88),
            ScoreAnswer(1.5, (0.1, 0.3, 0.6), 0.4, ("low", "mid", "high")),
        ),
        Usage(input_tokens=212),
    )
    assert parsed.response("m", result) == {
        "model": "m",
        "answers": {
            "team": {"type": "choice", "choice": "b", "probabilities": {"a": 0.25, "b": 0.75}, "confidence": 0.5},
            "urgent": {"type": "noul", "noul": 0.88},
            "anger": {
                "type": "score",
                "score": 1.5,
                "legend": {"0": "low", "1": "mid", "2": "high"},
                "probabilities": {"0": 0.1, "1": 0.3, "2": 0.6},
                "confidence": 0.4,
            },
        },
        "usage": {"input_tokens": 212, "output_tokens": 0},
    }


def test_a_question_error_names_the_question() -> None:
    parsed = read_request({"state": "s", "questions": {"ok": {"type": "noul"}, "team": {"type": "noul"}}})
    result = Result((NoulAnswer(0.5), QuestionError("max_length_exceeded", "too long")), Usage())
    with pytest.raises(ProtocolError) as caught:
        parsed.response("m", result)
    info = caught.value.info
    assert (info.status, info.code, info.question, info.reason) == (
        400,
        "question_failed",
        "team",
        "max_length_exceeded",
    )
    assert info.message == 'question "team" cannot be answered: too long'
