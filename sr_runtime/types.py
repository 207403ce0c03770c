"""The engine's request and answer types: plain frozen values, no I/O, no wire spellings.

A request is a state plus ordered questions. Question ids are not here: they never reach the
prompt, so the caller keeps them beside the answers, which come back in question order.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias

from sr_runtime.errors import DecisionError

# What a checkpoint's weights may run in (`--dtype`); sr_runtime/kernels.py says what auto means.
DTypeName: TypeAlias = Literal["auto", "bfloat16", "float16", "float32"]
DTYPES: tuple[DTypeName, ...] = ("auto", "bfloat16", "float16", "float32")


def device_token_budget(device: str) -> int:
    """Tokens of one engine pass when the operator gives none: 64K on CUDA (a pass of that many
    tokens keeps a GPU busy; attention there holds no scores, so memory is activations), 16K on
    CPU (the budget the CPU figures were measured with)."""
    return 65_536 if device.startswith("cuda") else 16_384


# Structured text: the standard lets a state, instructions and descriptions be objects or arrays.
Text: TypeAlias = str | dict | list
QuestionType = Literal["noul", "choice", "score", "set", "span", "box", "track"]
MediaKind = Literal["image", "video"]


def render_text(value: Text) -> str:
    """Text as a model reads it: strings as they are, objects and arrays as `json.dumps` text."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class NoulQuestion:
    """A yes/no question: P(true). Either criterion may be missing."""

    instructions: Text | None = None
    true: Text | None = None
    false: Text | None = None
    type: QuestionType = field(default="noul", init=False)


@dataclass(frozen=True, slots=True)
class ChoiceQuestion:
    """Pick one option; `options` keeps the request's order and each name byte for byte."""

    options: tuple[tuple[str, Text | None], ...]
    instructions: Text | None = None
    type: QuestionType = field(default="choice", init=False)


@dataclass(frozen=True, slots=True)
class ScoreQuestion:
    """Ordered levels, lowest first; the answer is the expected level."""

    levels: tuple[Text, ...]
    instructions: Text | None = None
    type: QuestionType = field(default="score", init=False)


@dataclass(frozen=True, slots=True)
class SetQuestion:
    """Any number of labels apply; `threshold` replaces the model's own (seed 002)."""

    labels: tuple[tuple[str, Text | None], ...]
    instructions: Text | None = None
    threshold: float | None = None
    preset: str | None = None
    type: QuestionType = field(default="set", init=False)


@dataclass(frozen=True, slots=True)
class SpanQuestion:
    """Mark labelled parts of the state; `head` picks a span head (router or broad)."""

    labels: tuple[tuple[str, Text | None], ...]
    instructions: Text | None = None
    threshold: float | None = None
    head: str | None = None
    preset: str | None = None
    type: QuestionType = field(default="span", init=False)


@dataclass(frozen=True, slots=True)
class BoxQuestion:
    """Locate what the instructions describe in the request's image."""

    instructions: Text | None = None
    type: QuestionType = field(default="box", init=False)


@dataclass(frozen=True, slots=True)
class TrackQuestion:
    """Follow what the instructions describe through the request's video, frame by frame."""

    instructions: Text | None = None
    type: QuestionType = field(default="track", init=False)


Question: TypeAlias = (
    NoulQuestion | ChoiceQuestion | ScoreQuestion | SetQuestion | SpanQuestion | BoxQuestion | TrackQuestion
)


@dataclass(frozen=True, slots=True)
class Option:
    """One coded option as the prompt shows it: the answer key and the text beside its code."""

    key: str
    label: str


def coded_options(question: Question) -> tuple[Option, ...]:
    """The options a question offers, in code order: noul is (false, true), score levels ascend.

    Asked several times for each question of a pass (checking, prompting, reading out), and the
    same questions come request after request: kept, by the question's value, in a bounded cache.
    A question holding JSON objects (unhashable) is worked out each time."""
    try:
        return _coded_options_kept(question)
    except TypeError:
        return _coded_options(question)


def _coded_options(question: Question) -> tuple[Option, ...]:
    if isinstance(question, NoulQuestion):
        no = render_text(question.false) if question.false is not None else "No"
        yes = render_text(question.true) if question.true is not None else "Yes"
        return (Option("false", f"false: {no}"), Option("true", f"true: {yes}"))
    if isinstance(question, ChoiceQuestion):
        return tuple(
            Option(name, name if desc is None else f"{name}: {render_text(desc)}") for name, desc in question.options
        )
    if isinstance(question, (SetQuestion, SpanQuestion)):  # labels, each with its own code
        return tuple(
            Option(name, name if desc is None else f"{name}: {render_text(desc)}") for name, desc in question.labels
        )
    if isinstance(question, (BoxQuestion, TrackQuestion)):
        return ()
    return tuple(Option(str(i), render_text(level)) for i, level in enumerate(question.levels))


_coded_options_kept = functools.lru_cache(maxsize=4096)(_coded_options)


@dataclass(frozen=True, slots=True)
class Media:
    """One asset as the request gave it: its kind, its bytes and the format it claims."""

    kind: MediaKind
    data: bytes
    format: str | None = None


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    """One state and its questions. `state_tokens` is a caller-given state block size (an int).

    `media` are the request's assets by placeholder: each stands where its placeholder occurs in the
    state, and those in `lead` stand before the state. `roles` maps keys of an object state to
    `user`, `context` or `answer` (seed 002); each family reads them its own way, and None means the
    whole state is the user's. `long_context` is the client's opt-in to prompts longer than the
    length the model was validated at.
    """

    state: Text
    questions: tuple[Question, ...]
    state_tokens: int | None = None
    roles: Mapping[str, str] | None = None
    long_context: bool = False
    media: Mapping[str, Media] = field(default_factory=dict)  # placeholder -> asset
    lead: tuple[str, ...] = ()  # placeholders read before the state (seed 002's media rule)
    truncate: frozenset[int] = frozenset()  # questions (by index) that may read only the state's first tokens


@dataclass(frozen=True, slots=True)
class NoulAnswer:
    noul: float
    abstain_probability: float | None = None  # P(the model would rather not answer), with an abstain code
    type: QuestionType = field(default="noul", init=False)


@dataclass(frozen=True, slots=True)
class ChoiceAnswer:
    choice: str
    probabilities: tuple[tuple[str, float], ...]
    confidence: float
    abstain_probability: float | None = None
    type: QuestionType = field(default="choice", init=False)


@dataclass(frozen=True, slots=True)
class ScoreAnswer:
    score: float
    probabilities: tuple[float, ...]
    confidence: float
    legend: tuple[str, ...]
    abstain_probability: float | None = None
    type: QuestionType = field(default="score", init=False)


@dataclass(frozen=True, slots=True)
class SetAnswer:
    """Each label's probability and those at or over the threshold; `composite` when each label
    was read as its own noul (then each also answers as `<question>.<label>`)."""

    probabilities: tuple[tuple[str, float], ...]
    selected: tuple[str, ...]
    threshold: float
    composite: bool
    type: QuestionType = field(default="set", init=False)


@dataclass(frozen=True, slots=True)
class Span:
    label: str
    start: int  # characters of the state text, end excluded
    end: int
    text: str
    probability: float


@dataclass(frozen=True, slots=True)
class SpanAnswer:
    spans: tuple[Span, ...]
    threshold: float
    head: str
    type: QuestionType = field(default="span", init=False)


@dataclass(frozen=True, slots=True)
class Box:
    """Edges as fractions (0-1) of the image's height (top, bottom) and width (left, right)."""

    top: float
    bottom: float
    left: float
    right: float


@dataclass(frozen=True, slots=True)
class BoxAnswer:
    box: Box
    confidence: float | None
    type: QuestionType = field(default="box", init=False)


@dataclass(frozen=True, slots=True)
class TrackAnswer:
    """One box per sampled moment of the video: (seconds from its start, box)."""

    track: tuple[tuple[float, Box], ...]
    confidence: float | None
    type: QuestionType = field(default="track", init=False)


Answer: TypeAlias = NoulAnswer | ChoiceAnswer | ScoreAnswer | SetAnswer | SpanAnswer | BoxAnswer | TrackAnswer


@dataclass(frozen=True, slots=True)
class QuestionError:
    """Why one question got no answer; `code` is the standard's error word."""

    code: str
    message: str
    reason: str | None = None

    @classmethod
    def of(cls, error: DecisionError) -> QuestionError:
        return cls(error.code, str(error), error.reason)


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens read for a request: its state block once plus every question block."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class MediaCardLimits:
    """What a request's assets may be on a model that reads media."""

    max_asset_bytes: int
    max_side: int  # pixels, the longer side of an image or video
    max_video_frames: int


@dataclass(frozen=True, slots=True)
class Limits:
    max_options: int
    min_levels: int
    max_levels: int
    max_input_tokens: int
    media: MediaCardLimits | None = None


@dataclass(frozen=True, slots=True)
class ModelCard:
    """What a model answers, for `GET /v1/models` and the router's capability checks."""

    name: str
    description: str
    question_types: tuple[QuestionType, ...]
    modalities: tuple[str, ...]
    presets: tuple[str, ...]
    limits: Limits
    attention_mode: str
    strengths: str
    media_in_questions: bool = False  # placeholders in instructions and criteria are read as media
    dtype: str | None = None  # what the weights run in (bfloat16, float32, ...); None: not a torch model


@dataclass(frozen=True, slots=True)
class Result:
    """A request's answers in question order (an error in place of each unanswered one)."""

    answers: tuple[Answer | QuestionError, ...]
    usage: Usage
    state_cache_hit: bool = False  # the state came from the LRU, computed by an earlier request
    complete: bool = True  # every input token was read (false when a video was sampled)
    truncated: frozenset[int] = frozenset()  # questions (by index) answered from the state's first tokens only


class DecisionEngine(Protocol):
    """What the CLI and the HTTP server need from any model, whatever its family."""

    name: str
    max_length: int

    def card(self) -> ModelCard: ...

    def answer_batch(self, requests: list[DecisionRequest]) -> list[Result]: ...
