"""The decision engine: owns a backbone, its readout and the state cache; answers requests.

`answer_batch` takes several requests at once (the HTTP server's one scheduler hands it what
arrived together). Each question becomes a row; rows from every request are packed into passes
under a token budget. Under `causal` and `prefix_bidir` each distinct state is computed once
(or found in the LRU) and every question continues from it; under
`noncausal_full_attention` the state reads the question, so each row is a whole prompt.
`reference=True` runs each question as one whole forward with a dense mask and no cache: the
path every other one is tested against. Before each pass the call asks the scheduler's ``stop``
and gives up (Stopped) once every request in it was abandoned, so a long call ends early too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from sr_runtime.assets import read_assets, the_one
from sr_runtime.backbone import Backbone, StateSnapshot
from sr_runtime.checkpoint import READOUT, Checkpoint, DecisionConfig, read_checkpoint
from sr_runtime.errors import CheckpointError, DecisionError, InvalidQuestion, MaxLengthExceeded, Stopped
from sr_runtime.heads import Heads
from sr_runtime.kernels import batch_state_prefills, default_token_budget, dtype_name, resolve_dtype
from sr_runtime.prompt import (
    LAYOUTS,
    MediaSpan,
    PromptTokens,
    encode_media_prompts,
    split_placeholders,
    with_question_media,
)
from sr_runtime.readout import SET_THRESHOLD, answer_from, batch_probabilities, finite, set_answer, temperature_for
from sr_runtime.spans import decode_spans
from sr_runtime.state_cache import StateCache, state_key
from sr_runtime.token_cache import CachedTokenizer
from sr_runtime.types import (
    Answer,
    BoxAnswer,
    BoxQuestion,
    ChoiceQuestion,
    DecisionRequest,
    Limits,
    MediaCardLimits,
    ModelCard,
    NoulQuestion,
    Question,
    QuestionError,
    QuestionType,
    Result,
    ScoreQuestion,
    SetQuestion,
    SpanAnswer,
    SpanQuestion,
    TrackAnswer,
    TrackQuestion,
    Usage,
    coded_options,
    render_text,
)
from sr_runtime.vision import VisionTower

_P = TypeVar("_P")
DEFAULT_TOKEN_BUDGET = 16_384
DEFAULT_STATE_CACHE_BYTES = 512 * 2**20
MIN_OPTIONS, MIN_LEVELS, MAX_LEVELS = 2, 2, 10


def resolve_max_length(config: DecisionConfig, requested: int | None) -> int:
    """A declared validated_length is the default; the operator's value wins, up to max_length."""
    if requested is None:
        return config.validated_length or config.max_length
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise CheckpointError(f"--max-model-len must be a positive integer, not {requested!r}")
    if requested > config.max_length:
        raise CheckpointError(f"--max-model-len {requested} is above the checkpoint's max_length {config.max_length}")
    return requested


@dataclass(frozen=True, slots=True)
class _Row:
    """One question to run: where its answer goes and what it reads."""

    request: int
    question: int
    prompt: PromptTokens
    key: str
    label: int | None = None  # the label a composite set's row reads as a noul
    video: tuple[torch.Tensor, tuple[float, ...]] | None = None  # a track row's frame rows and times


def _never() -> bool:
    return False


class Engine:
    """A decision checkpoint (or a stock base model read zero-shot), ready to answer."""

    # answer_batch takes ``stop`` and checks it before each pass (the scheduler asks engines this)
    stops_between_passes = True

    def __init__(
        self,
        name: str,
        checkpoint: Checkpoint,
        backbone: Backbone,
        readout: torch.Tensor,
        *,
        max_model_len: int | None = None,
        token_budget: int | None = None,
        state_cache_bytes: int = DEFAULT_STATE_CACHE_BYTES,
        reference: bool = False,
        description: str | None = None,
        strengths: str | None = None,
        vision: VisionTower | None = None,
        heads: Heads | None = None,
    ) -> None:
        config = checkpoint.config
        assert readout.shape == (len(config.codes), backbone.hidden_size)
        self.name = name
        self.checkpoint = checkpoint
        self.config = config
        self.backbone = backbone
        self.readout = readout
        self.layout = LAYOUTS[config.prompt_layout]
        self.max_length = resolve_max_length(config, max_model_len)
        # Past the validated length only with the client's long-context opt-in (seed 002): it
        # matters when the operator raised --max-model-len above validated_length.
        self.validated_length = min(config.validated_length or self.max_length, self.max_length)
        # None: sized for the device (sr_runtime/kernels.py; DEFAULT_TOKEN_BUDGET on CPU).
        self.token_budget = token_budget or default_token_budget(backbone.device)
        self.state_cache = StateCache(state_cache_bytes)
        # Instructions and criteria repeat across requests, states too where they are reused.
        self.tokens = CachedTokenizer(checkpoint.tokenizer)
        self.reference = reference
        self._description = description
        self._strengths = strengths
        self.vision = vision
        self.heads = heads
        self.media_in_questions = vision is not None and config.media is not None and config.media.in_questions
        # The abstain code is the last one; no option may take it.
        self.abstain = len(config.codes) - 1 if config.abstain_code is not None else None
        self.max_options = len(config.codes) - (self.abstain is not None)
        self._hits: set[str] = set()
        self._partial: set[int] = set()
        self._truncated: set[tuple[int, int]] = set()
        self._stop: Callable[[], bool] = _never
        # A call's distinct states in shared passes (on CUDA; see sr_runtime/kernels.py).
        self.batch_prefills = batch_state_prefills(backbone.device)

    @classmethod
    def load(
        cls,
        path: Path,
        *,
        name: str | None = None,
        device: str = "cpu",
        dtype: str = "auto",
        random_init: int | None = None,
        **options: Any,
    ) -> Engine:
        """Check a checkpoint folder, load its weights and readout; CheckpointError if unusable.

        `dtype`: auto, bfloat16, float16 or float32 (sr_runtime/kernels.py says what auto is).
        `random_init`: a seed; no weight file is read, every weight is made at random right on
        the device in `dtype` (benchmarks of shapes no checkpoint holds: `presets.create(...,
        weights=False)` writes such a folder). The vision tower and heads stay float32 and the
        readout is in the checkpoint's readout_dtype whatever `dtype` is; logits are read in float32."""
        checkpoint = read_checkpoint(path, weights=random_init is None)
        try:
            torch_dtype = resolve_dtype(dtype, _declared_dtype(path), device)
        except ValueError as exc:
            raise CheckpointError(str(exc)) from None
        backbone = Backbone.load(path, device, torch_dtype, random_init)
        config = checkpoint.config
        readout_dtype = getattr(torch, config.readout_dtype)
        codes = len(config.codes)
        if checkpoint.zero_shot:
            readout = backbone.lm_head_rows(config.token_ids)
        elif random_init is not None:
            generator = torch.Generator(backbone.device).manual_seed(random_init + 1)
            readout = torch.randn(codes, backbone.hidden_size, generator=generator, device=backbone.device)
            readout /= backbone.hidden_size**0.5
        else:
            readout = _load_readout(path, codes, backbone.hidden_size)
        # The tower stays float32: a few percent of a media request's work, and bfloat16 there
        # moved the tiny presets' image answers past seed 001's bar (0.03) on its own.
        vision = VisionTower.load(path, config.media, backbone.device, torch.float32, random_init)
        heads = (
            None
            if config.heads is None
            else Heads.load(path, config.heads, codes, backbone.hidden_size, backbone.device)
            if random_init is None
            else Heads.random(config.heads, codes, backbone.hidden_size, backbone.device, random_init)
        )
        return cls(
            name or path.name,
            checkpoint,
            backbone,
            readout.to(backbone.device, readout_dtype),
            vision=vision,
            heads=heads,
            **options,
        )

    @property
    def dtype(self) -> torch.dtype:
        """What the backbone's weights and activations are in."""
        return self.backbone.dtype

    def card(self) -> ModelCard:
        config = self.config
        reading = "zero-shot (LM head rows of option letters)" if self.checkpoint.zero_shot else "trained code readout"
        return ModelCard(
            name=self.name,
            description=self._description
            or f"decision checkpoint on {config.base_model}: {config.attention_mode} attention, {reading}",
            question_types=self.question_types,
            modalities=("text", "image", "video") if self.vision is not None else ("text",),
            presets=tuple(self.heads.config.presets) if self.heads is not None else (),
            limits=Limits(
                max_options=self.max_options,
                min_levels=MIN_LEVELS,
                max_levels=min(MAX_LEVELS, self.max_options),
                max_input_tokens=self.max_length,
                media=None
                if config.media is None
                else MediaCardLimits(
                    config.media.max_asset_bytes, config.media.max_side, config.media.max_video_frames
                ),
            ),
            attention_mode=config.attention_mode,
            strengths=self._strengths or "not measured by this runtime: see the checkpoint's own documentation",
            media_in_questions=self.media_in_questions,
            dtype=dtype_name(self.dtype),
        )

    # -- requests to rows -------------------------------------------------------------------

    def _check(self, question: Question) -> int:
        """The question's option or label count, if this model can answer it."""
        n = len(coded_options(question))
        codes = self.max_options
        if question.type not in self.question_types:
            raise InvalidQuestion(f"this model does not answer {question.type} questions")
        if isinstance(question, ScoreQuestion) and not MIN_LEVELS <= n <= min(MAX_LEVELS, codes):
            raise InvalidQuestion(f"a score question needs {MIN_LEVELS} to {min(MAX_LEVELS, codes)} levels, not {n}")
        if isinstance(question, ChoiceQuestion) and not MIN_OPTIONS <= n <= codes:
            raise InvalidQuestion(f"a choice question needs {MIN_OPTIONS} to {codes} options on this model, not {n}")
        if isinstance(question, (SetQuestion, SpanQuestion)) and not 1 <= n <= codes:
            raise InvalidQuestion(f"a {question.type} question needs 1 to {codes} labels on this model, not {n}")
        if isinstance(question, SpanQuestion):
            self._span_head(question)
        return n

    @property
    def question_types(self) -> tuple[QuestionType, ...]:
        """Every reading answers noul, choice, score, and set label by label; heads add the rest."""
        types: list[QuestionType] = ["noul", "choice", "score", "set"]
        heads = self.heads.config if self.heads is not None else None
        if heads is not None and (heads.span or "span" in heads.presets.values()):
            types.append("span")
        if heads is not None and heads.box and self.vision is not None:
            types.append("box")
        if heads is not None and heads.track and self.vision is not None:
            types.append("track")
        return tuple(types)

    def _span_head(self, question: SpanQuestion) -> str:
        """The head that answers: the preset's trained head, else the one asked for, else router."""
        assert self.heads is not None
        heads = self.heads.config
        if question.preset is not None and heads.presets.get(question.preset) == "span":
            return question.preset
        head = question.head or ("router" if "router" in heads.span else (heads.span or ("",))[0])
        if head not in heads.span:
            have = ", ".join(heads.span) or "none but its presets'"
            raise InvalidQuestion(
                f"this model has no {head} span head (span heads: {have})", reason="unsupported_field"
            )
        return head

    def _units(self, question: Question) -> list[tuple[int | None, Question]]:
        """The rows a question needs: one, or one noul per label for a set read label by label."""
        if isinstance(question, SetQuestion) and (self.heads is None or not self.heads.config.set):
            return [
                (i, NoulQuestion(question.instructions, true=option.label))
                for i, option in enumerate(coded_options(question))
            ]
        return [(None, question)]

    def _rows(self, index: int, request: DecisionRequest, slots: list[Answer | QuestionError | None]) -> list[_Row]:
        ready: list[int] = []
        for q, question in enumerate(request.questions):
            try:
                self._check(question)
                ready.append(q)
            except DecisionError as exc:
                slots[q] = QuestionError.of(exc)
        if not ready:
            return []
        state_block = "".join(self.layout.state_parts(request.state, request.lead))
        units = [(q, label, unit) for q in ready for label, unit in self._units(request.questions[q])]
        blocks = [self.layout.question_block(unit, self.config.codes) for _, _, unit in units]
        try:
            # Placeholders in questions are media only where the card says so (the bridge refuses them elsewhere).
            media = read_assets(
                self.vision, request, state_block + ("".join(blocks) if self.media_in_questions else "")
            )
            rows_of = {p: (a.rows, a.digest) for p, a in media.items()}
            # A question block is tokenized up to its first asset as a text-only one is (the state
            # block size rule), then piece by piece.
            pieces = [
                split_placeholders(b, [p for p in rows_of if p in b]) if self.media_in_questions else [b]
                for b in blocks
            ]
            prompts = encode_media_prompts(
                self.tokens, state_block, rows_of, [p[0] for p in pieces], request.state_tokens
            )
            prompts = [
                with_question_media(self.checkpoint.tokenizer, pr, p[1:], rows_of) if len(p) > 1 else pr
                for pr, p in zip(prompts, pieces)
            ]
        except DecisionError as exc:
            for q in ready:
                slots[q] = QuestionError.of(exc)
            return []
        rows = []
        limit = self.max_length if request.long_context else self.validated_length
        # overflow: truncate cuts the state once for every question that needs it (at the longest
        # such question's fit), so the cut state is still computed once.
        over = [
            limit - len(p.question) for (q, _, _), p in zip(units, prompts) if q in request.truncate and len(p) > limit
        ]
        keep = min(over, default=0)
        # A request's prompts mostly share one state tuple: hash it once. The tuple is kept with
        # its key, so its id cannot be another tuple's while this loop runs.
        keys: dict[int, tuple[tuple[int, ...], str]] = {}
        for (q, label, _), prompt in zip(units, prompts):
            try:
                cut = over and len(prompt) > limit and q in request.truncate
                if cut:
                    prompt = _truncated(prompt, keep)
                if len(prompt) > limit:
                    raise MaxLengthExceeded(len(prompt), limit, self.max_length if limit < self.max_length else None)
                if cut:
                    self._truncated.add((index, q))
                video = the_one(request.questions[q], media)
            except DecisionError as exc:
                slots[q] = QuestionError.of(exc)
                continue
            if id(prompt.state) not in keys:
                keys[id(prompt.state)] = (
                    prompt.state,
                    state_key(prompt.state, [(m.start, m.digest) for m in prompt.media]),
                )
            key = keys[id(prompt.state)][1]
            rows.append(_Row(index, q, prompt, key, label, video))
        if not all(a.whole for a in media.values()):
            self._partial.add(index)
        return [r for r in rows if slots[r.question] is None]

    # -- rows to hidden states --------------------------------------------------------------

    def _passes(self, rows: Sequence[_Row], width: Callable[[_Row], int]) -> list[list[_Row]]:
        """Greedy packing in order: a pass costs its row count times its widest row."""
        passes: list[list[_Row]] = []
        current: list[_Row] = []
        widest = 0
        for row in rows:
            cost = width(row)
            if current and (len(current) + 1) * max(widest, cost) > self.token_budget:
                passes.append(current)
                current, widest = [], 0
            current.append(row)
            widest = max(widest, cost)
        if current:
            passes.append(current)
        return passes

    def _question_passes(self, rows: Sequence[_Row]) -> list[list[_Row]]:
        """Greedy packing in order of rows that read their state in place: a pass costs the
        tokens of its distinct states once plus its row count times its widest question."""
        passes: list[list[_Row]] = []
        current: list[_Row] = []
        keys: set[str] = set()
        state_tokens = widest = 0
        for row in rows:
            extra = 0 if row.key in keys else len(row.prompt.state)
            wider = max(widest, len(row.prompt.question))
            if current and state_tokens + extra + (len(current) + 1) * wider > self.token_budget:
                passes.append(current)
                current, keys, state_tokens, wider, extra = (
                    [],
                    set(),
                    0,
                    len(row.prompt.question),
                    len(row.prompt.state),
                )
            current.append(row)
            keys.add(row.key)
            state_tokens += extra
            widest = wider
        if current:
            passes.append(current)
        return passes

    def _each_pass(self, passes: Iterable[_P]) -> Iterator[_P]:
        """``passes`` in turn; before each, the call is given up if nobody waits for it any more."""
        for p in passes:
            if self._stop():
                raise Stopped("every request of this engine call was abandoned")
            yield p

    def _states(self, rows: Sequence[_Row]) -> dict[str, StateSnapshot]:
        """Each distinct state of these rows, from the LRU or computed once."""
        states: dict[str, StateSnapshot] = {}
        missing: dict[str, _Row] = {}
        for row in rows:
            if row.key in states or row.key in missing:
                continue
            state = self.state_cache.get(row.key)
            if state is None:
                missing[row.key] = row
            else:
                self._hits.add(row.key)
                states[row.key] = state
        mode = self.config.attention_mode
        if self.batch_prefills and mode == "prefix_bidir" and len(missing) > 1:
            # Shortest first, so a pass pads little; each pass's rows times its longest within budget.
            ordered = sorted(missing.values(), key=lambda r: len(r.prompt.state))
            for group in self._each_pass(self._passes(ordered, lambda r: len(r.prompt.state))):
                made = self.backbone.prefill_many(
                    [r.prompt.state for r in group], mode, [r.prompt.media for r in group]
                )
                for row, state in zip(group, made):
                    self.state_cache.put(row.key, state)
                    states[row.key] = state
            return states
        for key, row in missing.items():
            if self._stop():  # a prefill is a pass of its own
                raise Stopped("every request of this engine call was abandoned")
            states[key] = self.backbone.prefill(row.prompt.state, mode, row.prompt.media)
            self.state_cache.put(key, states[key])
        return states

    def _one_pass(self, rows: Sequence[_Row]) -> tuple[torch.Tensor, dict[str, StateSnapshot]] | None:
        """Rows of one state that is not cached, and that fit one pass with it: the state and the
        rows in one pass (Backbone.state_and_questions), which spares a small request a whole
        pass's fixed cost. None where the usual passes apply."""
        key = rows[0].key
        widest = max(len(r.prompt.question) for r in rows)
        state = rows[0].prompt
        if (
            any(r.key != key for r in rows)
            or len(state.state) + len(rows) * widest > self.token_budget
            or key in self.state_cache
        ):
            return None
        if self._stop():
            raise Stopped("every request of this engine call was abandoned")
        self.state_cache.stats.misses += 1  # as `get` counts the miss in the usual passes
        snapshot, hidden = self.backbone.state_and_questions(
            state.state,
            [r.prompt.question for r in rows],
            self.config.attention_mode,
            self.token_budget,
            state.media,
            [r.prompt.question_media for r in rows],
        )
        self.state_cache.put(key, snapshot)
        return hidden, {key: snapshot}

    def _state_hidden(self, row: _Row, states: dict[str, StateSnapshot]) -> torch.Tensor:
        """[S, hidden]: the last layer on the row's state, as its prompt's forward saw it."""
        if row.key in states:
            return states[row.key].hidden
        prompt = row.prompt  # the reference path, or a mode whose state reads the question
        whole = self.backbone.prompt_hidden(
            prompt.state + prompt.question, len(prompt.state), self.config.attention_mode, _whole_media(prompt)
        )
        return whole[: len(prompt.state)]

    def _hidden(self, rows: Sequence[_Row]) -> tuple[torch.Tensor, dict[str, StateSnapshot]]:
        mode = self.config.attention_mode
        if self.reference:
            return torch.cat(
                [
                    self.backbone.prompt_rows(
                        [r.prompt.state + r.prompt.question],
                        [len(r.prompt.state)],
                        mode,
                        [_whole_media(r.prompt)],
                        dense=True,
                    )
                    for r in self._each_pass(rows)
                ]
            ), {}
        if mode == "noncausal_full_attention":
            passes = self._passes(rows, lambda r: len(r.prompt))
            return torch.cat(
                [
                    self.backbone.prompt_rows(
                        [r.prompt.state + r.prompt.question for r in p],
                        [len(r.prompt.state) for r in p],
                        mode,
                        [_whole_media(r.prompt) for r in p],
                    )
                    for p in self._each_pass(passes)
                ]
            ), {}
        one = self._one_pass(rows)
        if one is not None:
            return one
        states = self._states(rows)
        # Rows of one state sit together, so a pass pads little; answers do not depend on packing.
        order = sorted(range(len(rows)), key=lambda i: (len(rows[i].prompt.state), rows[i].key))
        ordered = [rows[i] for i in order]
        hidden = torch.cat(
            [
                self.backbone.question_rows(
                    [states[r.key] for r in p],
                    [r.prompt.question for r in p],
                    mode,
                    self.token_budget,
                    [r.prompt.question_media for r in p],
                )
                for p in self._each_pass(self._question_passes(ordered))
            ]
        )
        return hidden[torch.tensor(order).argsort()], states

    # -- answers ----------------------------------------------------------------------------

    def answer_batch(self, requests: list[DecisionRequest], stop: Callable[[], bool] | None = None) -> list[Result]:
        """Answers for each request, in question order; a QuestionError where one cannot be answered.

        ``stop``: asked before each pass; when it says True the call raises Stopped (the
        scheduler's: every request of the call was abandoned)."""
        self._stop = stop or _never
        try:
            return self._answer_batch(requests)
        finally:
            self._stop = _never

    def _answer_batch(self, requests: list[DecisionRequest]) -> list[Result]:
        slots: list[list[Answer | QuestionError | None]] = [[None] * len(r.questions) for r in requests]
        self._hits = set()  # states of this call found in the LRU
        self._partial = set()  # requests of this call not read whole
        self._truncated = set()  # (request, question) of this call read from a truncated state
        rows = [row for i, request in enumerate(requests) for row in self._rows(i, request, slots[i])]
        labels: dict[tuple[int, int], dict[int, float]] = {}  # a composite set's P(true) per label
        if rows:
            hidden, states = self._hidden(rows)
            logits = (hidden.to(self.readout.dtype) @ self.readout.T).float().cpu()
            questions = [requests[row.request].questions[row.question] for row in rows]
            ts = [
                temperature_for(
                    len(requests[row.request].questions), self.config.temperature, self.config.temperature_by_questions
                )
                for row in rows
            ]
            # Every row's code probabilities at once; a label row reads its noul's two codes, no abstain.
            readings = batch_probabilities(
                logits,
                [
                    2 if row.label is not None else len(coded_options(question))
                    for row, question in zip(rows, questions)
                ],
                ts,
                [None if row.label is not None else self.abstain for row in rows],
            )
            for row, question, h, reading, t in zip(rows, questions, hidden, readings, ts):
                request = requests[row.request]
                try:
                    if row.label is not None:
                        labels.setdefault((row.request, row.question), {})[row.label] = finite(*reading)[0][1]
                        continue
                    slots[row.request][row.question] = self._answer(request, question, row, h, reading, t, states)
                except DecisionError as exc:
                    slots[row.request][row.question] = QuestionError.of(exc)
        for (i, q), probs in labels.items():
            question = requests[i].questions[q]
            assert isinstance(question, SetQuestion)
            if slots[i][q] is None:  # else one of its labels failed, and with it the set
                slots[i][q] = set_answer(
                    question, [probs[label] for label in range(len(probs))], self._threshold(question), composite=True
                )
        return [
            Result(
                tuple(s),  # type: ignore[arg-type]  # every slot is filled by now
                _usage([r for r in rows if r.request == i]),
                state_cache_hit=any(r.key in self._hits for r in rows if r.request == i),
                complete=i not in self._partial,
                truncated=frozenset(q for r, q in self._truncated if r == i),
            )
            for i, s in enumerate(slots)
        ]

    def _threshold(self, question: SetQuestion | SpanQuestion) -> float:
        if question.threshold is not None:
            return question.threshold
        return self.heads.config.threshold if self.heads is not None else SET_THRESHOLD

    def _answer(
        self,
        request: DecisionRequest,
        question: Question,
        row: _Row,
        q: torch.Tensor,
        reading: tuple[list[float], float | None],
        t: float,
        states: dict[str, StateSnapshot],
    ) -> Answer:
        """One row's answer: the code readout, or the head its question type needs (`q` is the
        hidden state of the question's last token, which the readout and every head read)."""
        n = len(coded_options(question))
        if isinstance(question, SetQuestion):
            assert self.heads is not None
            return set_answer(
                question, self.heads.set_probabilities(q, n, t), self._threshold(question), composite=False
            )
        if isinstance(question, SpanQuestion):
            assert self.heads is not None
            head = self._span_head(question)
            probs = self.heads.span_probabilities(head, self._state_hidden(row, states), q, n).cpu()
            text = render_text(request.state)
            block = "".join(self.layout.state_parts(request.state, request.lead))
            names = [o.key for o in coded_options(question)]
            return SpanAnswer(
                decode_spans(probs, row.prompt.offsets, text, len(block) - len(text), names, self._threshold(question)),
                self._threshold(question),
                head,
            )
        if isinstance(question, BoxQuestion):
            assert self.heads is not None
            box, confidence = self.heads.box(q)
            return BoxAnswer(box, confidence)
        if isinstance(question, TrackQuestion):
            assert self.heads is not None and row.video is not None
            frames, times = row.video
            boxes = self.heads.track(q, frames)
            return TrackAnswer(
                tuple((time, box) for time, (box, _) in zip(times, boxes)), sum(c for _, c in boxes) / len(boxes)
            )
        return answer_from(question, *finite(*reading))

    def answer(self, request: DecisionRequest) -> Result:
        return self.answer_batch([request])[0]


def _truncated(prompt: PromptTokens, keep: int) -> PromptTokens:
    """The prompt with only the state's first `keep` tokens (never cutting an asset in two: the
    cut moves before it); unchanged if no state token would be left."""
    for m in prompt.media:
        if m.start < keep < m.start + len(m):
            keep = m.start
    if keep < 1:
        return prompt
    media = tuple(m for m in prompt.media if m.start + len(m) <= keep)
    return PromptTokens(prompt.state[:keep], prompt.question, media, prompt.offsets[:keep], prompt.question_media)


def _whole_media(prompt: PromptTokens) -> tuple[MediaSpan, ...]:
    """Every asset of a whole prompt, the question's counted from the prompt's first token."""
    shift = len(prompt.state)
    return (*prompt.media, *(MediaSpan(m.start + shift, m.embeds, m.digest) for m in prompt.question_media))


def _usage(rows: Sequence[_Row]) -> Usage:
    states = {r.key: len(r.prompt.state) for r in rows}
    return Usage(input_tokens=sum(states.values()) + sum(len(r.prompt.question) for r in rows))


def _declared_dtype(path: Path) -> str | None:
    """config.json's dtype (transformers 5 writes `dtype`, earlier ones `torch_dtype`)."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # read_checkpoint has read it already; nothing declared then
    declared = config.get("dtype") or config.get("torch_dtype")
    return declared if isinstance(declared, str) else None


def _load_readout(path: Path, codes: int, hidden: int) -> torch.Tensor:
    try:
        weight = load_file(str(path / READOUT)).get("weight")
    except (OSError, SafetensorError) as exc:
        raise CheckpointError(f"cannot read {path / READOUT}: {exc}") from None
    if weight is None or tuple(weight.shape) != (codes, hidden):
        shape = None if weight is None else tuple(weight.shape)
        raise CheckpointError(f"{READOUT} weight has shape {shape}, expected {(codes, hidden)} (codes x hidden_size)")
    return weight
