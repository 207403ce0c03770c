"""A minimal systemone/0.2 reader and writer for `vllm-srun answer`.

Reads the standard request (state, questions with noul/choice/score criteria, model) into
engine types and writes the standard response (`model`, `answers`, `usage`). The HTTP server
swaps this module for the protocol layer's codec (sr_control/systemone); nothing else here
knows wire spellings. Unknown top-level members are ignored, as the standard asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sr_runtime.errors import DecisionError, InvalidInput, InvalidQuestion
from sr_runtime.types import (
    ChoiceAnswer,
    ChoiceQuestion,
    DecisionRequest,
    NoulAnswer,
    NoulQuestion,
    Question,
    QuestionError,
    Result,
    ScoreQuestion,
)

_QUESTION_MEMBERS = frozenset({"type", "instructions", "criteria"})


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A request and the question ids, which never reach the engine."""

    model: str | None
    ids: tuple[str, ...]
    request: DecisionRequest


def _is_text(value: Any) -> bool:
    return isinstance(value, (str, dict, list))


def _question(qid: str, raw: Any) -> Question:
    def bad(reason: str) -> InvalidQuestion:
        return InvalidQuestion(f"question {qid!r}: {reason}")

    if not isinstance(raw, dict):
        raise bad("must be an object")
    unknown = sorted(set(raw) - _QUESTION_MEMBERS)
    if unknown:
        raise bad(f"unknown member {', '.join(map(repr, unknown))}")
    kind, instructions, criteria = raw.get("type"), raw.get("instructions"), raw.get("criteria")
    if instructions is not None and not _is_text(instructions):
        raise bad("instructions must be text, an object or an array")
    if kind == "noul":
        if criteria is None:
            criteria = {}
        if not isinstance(criteria, dict) or not set(criteria) <= {"true", "false"}:
            raise bad('noul criteria must be an object with "true" and/or "false"')
        if any(v is not None and not _is_text(v) for v in criteria.values()):
            raise bad("noul criteria must be text")
        return NoulQuestion(instructions, criteria.get("true"), criteria.get("false"))
    if kind == "choice":
        if not isinstance(criteria, dict) or not criteria:
            raise bad("choice criteria must be a non-empty object of option names to descriptions")
        if any(v is not None and not _is_text(v) for v in criteria.values()):
            raise bad("an option's description must be text, an object, an array or null")
        return ChoiceQuestion(tuple(criteria.items()), instructions)
    if kind == "score":
        if isinstance(criteria, dict):
            raise bad("score criteria must be an array of levels, lowest first (the map form is not accepted)")
        if not isinstance(criteria, list) or not all(_is_text(level) for level in criteria):
            raise bad("score criteria must be an array of levels (text, never null)")
        return ScoreQuestion(tuple(criteria), instructions)
    if kind in ("box", "set", "span", "track"):
        raise bad(f"type {kind!r} is not answered by this runtime (noul, choice, score)")
    raise bad(f"unknown type {kind!r} (noul, choice, score)")


def read_request(body: Any) -> ParsedRequest:
    """A systemone/0.2 request body (parsed JSON) as engine types; InvalidInput/InvalidQuestion if not."""
    if not isinstance(body, dict):
        raise InvalidInput("the request must be a JSON object")
    if "state" not in body or body["state"] is None:
        raise InvalidInput('the request needs a "state" (text, an object or an array)')
    if not _is_text(body["state"]):
        raise InvalidInput('"state" must be text, an object or an array')
    if body.get("assets"):
        raise InvalidInput("this runtime reads text only: assets (images, video) are not supported")
    questions = body.get("questions")
    if not isinstance(questions, dict) or not questions:
        raise InvalidInput('the request needs "questions": an object of at least one named question')
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidInput('"model" must be a string')
    parsed = tuple(_question(qid, raw) for qid, raw in questions.items())
    return ParsedRequest(model, tuple(questions), DecisionRequest(body["state"], parsed))


def answer_json(answer: Any) -> dict[str, Any]:
    if isinstance(answer, NoulAnswer):
        return {"type": "noul", "noul": answer.noul}
    if isinstance(answer, ChoiceAnswer):
        return {
            "type": "choice",
            "choice": answer.choice,
            "probabilities": dict(answer.probabilities),
            "confidence": answer.confidence,
        }
    return {
        "type": "score",
        "score": answer.score,
        "legend": {str(i): level for i, level in enumerate(answer.legend)},
        "probabilities": {str(i): p for i, p in enumerate(answer.probabilities)},
        "confidence": answer.confidence,
    }


def first_error(ids: tuple[str, ...], result: Result) -> tuple[str, QuestionError] | None:
    """The first question, in request order, that got no answer."""
    for qid, answer in zip(ids, result.answers):
        if isinstance(answer, QuestionError):
            return qid, answer
    return None


def response_json(model: str, ids: tuple[str, ...], result: Result) -> dict[str, Any]:
    """The standard response; every question must have an answer (check `first_error` first)."""
    return {
        "model": model,
        "answers": {qid: answer_json(answer) for qid, answer in zip(ids, result.answers)},
        "usage": {"input_tokens": result.usage.input_tokens, "output_tokens": result.usage.output_tokens},
    }


def error_json(qid: str | None, error: QuestionError | DecisionError) -> dict[str, Any]:
    """The standard 422-style error body, with vllm-sr's flat `code` and `question`."""
    code = error.code
    message = error.message if isinstance(error, QuestionError) else str(error)
    loc: list[str] = ["body", "questions", qid] if qid is not None else ["body"]
    body: dict[str, Any] = {"detail": [{"loc": loc, "msg": message, "type": code}], "code": code}
    if qid is not None:
        body.update(code="question_failed", question=qid, reason=code)
    return body
