"""The readout: mask to the option count, divide by T once, softmax; answers and confidences."""

from __future__ import annotations

import math

import pytest
import torch

from sr_runtime.readout import (
    answer_from,
    choice_confidence,
    code_probabilities,
    score_confidence,
    temperature_for,
)
from sr_runtime.types import ChoiceAnswer, ChoiceQuestion, NoulQuestion, ScoreAnswer, ScoreQuestion

BUCKETS = ((1, 4, 16), (1.046, 1.0, 0.9, 0.8))


def test_codes_beyond_the_option_count_do_not_count() -> None:
    logits = torch.tensor([1.0, 2.0, 0.5, 9.0, -3.0])
    wild = logits.clone()
    wild[3:] = torch.tensor([50.0, 80.0])
    assert code_probabilities(logits, 3, 1.0) == pytest.approx(code_probabilities(wild, 3, 1.0), abs=1e-7)
    assert sum(code_probabilities(logits, 3, 1.0)) == pytest.approx(1.0)
    assert len(code_probabilities(logits, 2, 1.0)) == 2


def test_temperature_divides_the_logits_once() -> None:
    logits = torch.tensor([0.3, -1.2, 2.0])
    for t in (0.5, 1.0, 1.046, 3.0):
        p = code_probabilities(logits, 3, t)
        # log-odds between two codes are the logit gap divided by T, and only once.
        assert math.log(p[2] / p[0]) == pytest.approx((2.0 - 0.3) / t, rel=1e-5)
    assert max(range(3), key=lambda i: code_probabilities(logits, 3, 7.0)[i]) == 2


@pytest.mark.parametrize(
    ("questions", "expected"),
    [(1, 1.046), (2, 1.0), (4, 1.0), (5, 0.9), (16, 0.9), (17, 0.8), (400, 0.8)],
)
def test_the_first_bucket_whose_bound_holds_the_question_count_wins(questions: int, expected: float) -> None:
    assert temperature_for(questions, 2.0, BUCKETS) == expected


def test_without_buckets_the_scalar_temperature_applies() -> None:
    assert temperature_for(7, 0.75, None) == 0.75


def test_choice_confidence_is_the_standards_formula() -> None:
    assert choice_confidence([0.0, 0.11, 0.89]) == pytest.approx(0.835)  # the standard's `tone` example
    assert choice_confidence([0.25] * 4) == pytest.approx(0.0)
    assert choice_confidence([1.0, 0.0]) == pytest.approx(1.0)


def test_score_confidence_is_the_standards_distance_formula() -> None:
    assert score_confidence([0.0, 0.12, 0.88]) == pytest.approx(0.82)  # the standard's `urgency` example
    assert score_confidence([0.0, 0.0, 1.0]) == pytest.approx(1.0)
    assert score_confidence([0.5, 0.0, 0.5]) == 0.0  # clipped at 0


def test_answers_from_probabilities() -> None:
    noul = answer_from(NoulQuestion("Is it?"), [0.3, 0.7])
    assert noul.noul == 0.7  # type: ignore[union-attr]
    choice = answer_from(ChoiceQuestion((("b", None), ("a", "first")), None), [0.2, 0.8])
    assert isinstance(choice, ChoiceAnswer)
    assert choice.choice == "a" and dict(choice.probabilities) == {"b": 0.2, "a": 0.8}
    score = answer_from(ScoreQuestion(("low", {"level": "mid"}, "high")), [0.1, 0.3, 0.6])
    assert isinstance(score, ScoreAnswer)
    assert score.score == pytest.approx(0.3 + 1.2)
    assert score.legend == ("low", '{"level": "mid"}', "high")
