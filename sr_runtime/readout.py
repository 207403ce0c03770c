"""From code logits to typed answers: mask to the option count, divide by T once, softmax.

The readout reads the last prompt token: its hidden state times a [codes, hidden] matrix gives
one logit per answer code. Only the first n codes are offered to a question of n options.
Temperature never changes the argmax; confidence follows the System One standard (§2.1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from sr_runtime.errors import InvalidModelOutput
from sr_runtime.types import (
    Answer,
    ChoiceAnswer,
    ChoiceQuestion,
    NoulAnswer,
    NoulQuestion,
    Question,
    ScoreAnswer,
    ScoreQuestion,
    SetAnswer,
    SetQuestion,
    coded_options,
    render_text,
)

SET_THRESHOLD = 0.5  # a set read label by label: a label is chosen when P(it applies) >= 1/2


def temperature_for(
    n_questions: int, temperature: float, by_questions: tuple[tuple[int, ...], tuple[float, ...]] | None
) -> float:
    """The temperature for a request of `n_questions` questions.

    With `temperature_by_questions` = (bounds, temperatures), the first bucket whose bound is
    >= n wins; above every bound, the last temperature. Without it, the scalar temperature.
    """
    if by_questions is None:
        return temperature
    bounds, temperatures = by_questions
    for bound, t in zip(bounds, temperatures):
        if n_questions <= bound:
            return t
    return temperatures[-1]


def code_probabilities(logits: torch.Tensor, n_options: int, temperature: float) -> list[float]:
    """Probabilities over the first `n_options` codes: mask the rest to -inf, divide by T, softmax."""
    return abstaining_probabilities(logits, n_options, temperature, None)[0]


def abstaining_probabilities(
    logits: torch.Tensor, n_options: int, temperature: float, abstain: int | None
) -> tuple[list[float], float | None]:
    """As `code_probabilities`, with the abstain code (when the checkpoint has one) offered too.

    p = softmax over the n option codes and the abstain code; the options' probabilities are
    then renormalized among themselves (they answer "if you must answer"), and p[abstain] is
    the abstain probability.
    """
    return finite(*batch_probabilities(logits[None], [n_options], [temperature], [abstain])[0])


def batch_probabilities(
    logits: torch.Tensor, n_options: Sequence[int], temperatures: Sequence[float], abstain: Sequence[int | None]
) -> list[tuple[list[float], float | None]]:
    """`abstaining_probabilities` for each row of [R, codes] logits, in one softmax and one copy
    to Python; unchecked (`finite` checks the rows that are read)."""
    codes = torch.arange(logits.shape[-1])
    is_option = codes[None, :] < torch.tensor(n_options, dtype=torch.long)[:, None]  # [R, codes]
    abstains = torch.tensor([-1 if a is None else a for a in abstain], dtype=torch.long)[:, None]
    keep = is_option | (codes[None, :] == abstains)
    t = torch.tensor(temperatures, dtype=torch.float32)[:, None]
    probs = torch.softmax(logits.to(torch.float32).masked_fill(~keep, float("-inf")) / t, dim=-1)
    p_abstain = probs.gather(1, abstains.clamp(min=0))[:, 0].tolist()
    renormalized = probs * is_option / (probs * is_option).sum(-1, keepdim=True)
    # Only the options' columns go to Python (of up to 256 codes, a question reads a few).
    options = torch.where(abstains >= 0, renormalized, probs)[:, : max(n_options)].tolist()
    return [(row[:n], None if a is None else pa) for row, n, a, pa in zip(options, n_options, abstain, p_abstain)]


def finite(options: list[float], p_abstain: float | None) -> tuple[list[float], float | None]:
    """The probabilities as they are, or InvalidModelOutput if one is not a number (NaN weights)."""
    if not all(math.isfinite(p) for p in options) or (p_abstain is not None and not math.isfinite(p_abstain)):
        raise InvalidModelOutput("the readout produced a non-finite probability")
    return options, p_abstain


def choice_confidence(probs: Sequence[float]) -> float:
    """(n * pmax - 1) / (n - 1): 0 for a uniform answer, 1 for a certain one."""
    n = len(probs)
    if n == 1:
        return 1.0
    return min(1.0, max(0.0, (n * max(probs) - 1) / (n - 1)))


def score_confidence(probs: Sequence[float]) -> float:
    """max(0, 1 - sum p_i |i - mode| / D), D the mean |i - (n-1)/2| over the levels."""
    n = len(probs)
    if n == 1:
        return 1.0
    mode = max(range(n), key=lambda i: probs[i])
    spread = sum(p * abs(i - mode) for i, p in enumerate(probs))
    d = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
    return min(1.0, max(0.0, 1 - spread / d))


def answer_from(question: Question, probs: Sequence[float], abstain: float | None = None) -> Answer:
    """The typed answer to `question` from its option probabilities (in code order)."""
    if isinstance(question, NoulQuestion):
        return NoulAnswer(noul=probs[1], abstain_probability=abstain)
    if isinstance(question, ChoiceQuestion):
        keys = [o.key for o in coded_options(question)]
        best = max(range(len(keys)), key=lambda i: probs[i])
        return ChoiceAnswer(
            choice=keys[best],
            probabilities=tuple(zip(keys, probs)),
            confidence=choice_confidence(probs),
            abstain_probability=abstain,
        )
    if not isinstance(question, ScoreQuestion):
        raise TypeError(f"{type(question).__name__} questions are not answered from option probabilities")
    return ScoreAnswer(
        score=sum(i * p for i, p in enumerate(probs)),
        probabilities=tuple(probs),
        confidence=score_confidence(probs),
        legend=tuple(render_text(level) for level in question.levels),
        abstain_probability=abstain,
    )


def set_answer(question: SetQuestion, probs: Sequence[float], threshold: float, composite: bool) -> SetAnswer:
    """Each label's probability and the labels at or over the threshold, in label order."""
    names = [o.key for o in coded_options(question)]
    selected = tuple(name for name, p in zip(names, probs) if p >= threshold)
    return SetAnswer(tuple(zip(names, probs)), selected, threshold, composite)
