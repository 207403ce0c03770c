"""The IR and the engine, both ways: the one place the runtime translates between them.

    plan = to_engine(req.ir, card, body.parts)       # each named request as a DecisionRequest
    reply = to_reply(plan, results, "default")       # the Reply a listener codec's answer_success takes

A question the model cannot take (a type it does not answer, a field it does not honour, media
on a text-only model) never reaches the engine: it fails here with the question error of seed
002's table, and the codec decides what that does to the request (/v1/systemone fails it,
/v1/decisions answers it inside a 200). JSON content reaches the engine as plain Python values,
so an object state is read as the `json.dumps` text a Python server would write (the same text
the `state_text` deviation sends); how a family reads roles is the engine's business. Assets
reach it as bytes (from base64 or a multipart part) under their placeholders.

Answers go back in seed 002's shapes: a set's in `sets` (and, read label by label, a `noul` per
label under `<question>.<label>`), a span's in `spans`, with `thresholds` and `span_heads` (not
on 4.0) beside the answers, and `meta` when asked for.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sr_runtime.types import (
    Answer,
    Box,
    BoxAnswer,
    BoxQuestion,
    ChoiceAnswer,
    ChoiceQuestion,
    DecisionRequest,
    Media,
    ModelCard,
    NoulAnswer,
    NoulQuestion,
    QuestionError,
    Result,
    ScoreAnswer,
    ScoreQuestion,
    SetAnswer,
    SetQuestion,
    Span,
    SpanAnswer,
    SpanQuestion,
    TrackAnswer,
    TrackQuestion,
)
from sr_runtime.types import Question as EngineQuestion
from systemone import Batch, ItemResult, Reply, Request
from systemone.generated.fields import PRESETS
from systemone.ir import MISSING, Question, items
from systemone.jsontext import JsonObject, Number, plain, strings

# Question fields no model here honours; answering without them would answer another question.
REFUSED_FIELDS = {
    "over": "reads only some state keys (a Vela field; Decision-style families refuse it)",
    "decision_adapter": "names an adapter, and this model loads none",
    "at": "looks at one moment of a video; here a box reads an image and a track every sampled frame",
    "rate": "sets the frames per second a track reads; here a track reads the checkpoint's fixed sample of frames",
}
# Fixed words for the `reason` of each engine error code.
REASONS = {"invalid_question": "question_malformed"}


@dataclass(frozen=True, slots=True)
class Failure:
    """A question error decided before (or after) the engine: seed 002's code and a fixed word."""

    code: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ItemPlan:
    """One named request: what the engine answers, and the questions that failed here."""

    questions: Mapping[str, str]  # id -> type of every question the codec expects an answer to
    request: DecisionRequest | None  # the engine's questions are those ids not in `failures`
    failures: Mapping[str, Failure] = field(default_factory=dict)
    full_input: frozenset[str] = frozenset()  # ids that asked require_full_input
    scan_budget: int | None = None  # options.max_tokens
    return_meta: bool = False  # options.return_meta


@dataclass(frozen=True, slots=True)
class EnginePlan:
    items: Mapping[str, ItemPlan]  # "" names a single request

    @property
    def requests(self) -> list[DecisionRequest]:
        return [item.request for item in self.items.values() if item.request is not None]


class _Refused(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure


# ---------------------------------------------------------------------------- IR -> engine


def to_engine(ir: Request | Batch, card: ModelCard, parts: Mapping[str, bytes] | None = None) -> EnginePlan:
    """``parts`` are a multipart body's uploaded assets by part name."""
    budget = _int_option(ir.options, "max_tokens")
    meta = ir.options is not None and ir.options.get("return_meta") is True
    return EnginePlan(
        {name: _item(r, card, ir.long_context or r.long_context, budget, meta, parts or {}) for name, r in items(ir)}
    )


def _item(
    r: Request, card: ModelCard, long_context: bool, budget: int | None, meta: bool, parts: Mapping[str, bytes]
) -> ItemPlan:
    media = _media_failure(r, card)  # a model that cannot read the media never decodes them
    assets: dict[str, Media] = {}
    if media is None:
        assets, media = _assets(r, parts)
    ids: dict[str, str] = {}
    questions: list[EngineQuestion] = []
    failures: dict[str, Failure] = {}
    for q_id, q in r.questions.items():
        if q.problem is not None:
            continue  # /v1/decisions: the codec answers it with its own reading problem
        try:
            question = _engine_question(q, card)
            if media is not None:
                raise _Refused(media)
            if not card.media_in_questions:
                _no_media_in(q, r.assets)
        except _Refused as refused:
            failures[q_id] = refused.failure
        else:
            questions.append(question)
        ids[q_id] = q.type
    request = None
    if questions:
        state = plain(r.state)
        roles = r.roles.of(state) if r.roles.mode != "none" and isinstance(state, dict) else None
        request = DecisionRequest(
            state, tuple(questions), roles=roles, long_context=long_context, media=assets, lead=r.media
        )
    full = frozenset(q_id for q_id, q in r.questions.items() if q.extensions.get("require_full_input") is True)
    if request is not None:  # the engine's index of each question that may read the state's first tokens only
        answered = [q_id for q_id in ids if q_id not in failures]
        cut = frozenset(
            i for i, q_id in enumerate(answered) if r.questions[q_id].extensions.get("overflow") == "truncate"
        )
        request = replace(request, truncate=cut) if cut else request
    return ItemPlan(ids, request, failures, full, budget, meta)


def _assets(r: Request, parts: Mapping[str, bytes]) -> tuple[dict[str, Media], Failure | None]:
    """Each asset's bytes, inline (base64) or uploaded (a multipart part); a Failure if one is unusable.

    Bytes only: decoding them into pixels, and the card's limits, are the engine's (`media.py`).
    """
    out: dict[str, Media] = {}
    for placeholder, asset in r.assets.items():
        members = asset.members
        part = members.get("part")
        if part is not None:  # the standard: with part set, data_base64 is ignored
            if part not in parts:
                return {}, Failure(
                    "invalid_input",
                    "invalid_asset",
                    f"asset {placeholder!r} names the multipart part {part!r}, and the body has none",
                )
            data = parts[part]
        else:
            try:
                data = base64.b64decode(str(members.get("data_base64", "")), validate=True)
            except binascii.Error:
                return {}, Failure(
                    "invalid_input", "invalid_asset", f"asset {placeholder!r}: data_base64 is not base64"
                )
        fmt = members.get("format")
        out[placeholder] = Media(asset.type, data, None if fmt is None else str(fmt))  # type: ignore[arg-type]
    return out, None


def _no_media_in(q: Question, assets: Mapping[str, Any]) -> None:
    """Placeholders in instructions or criteria, on a model whose card does not read media there."""
    texts = [*strings(q.instructions), *strings(q.criteria)]
    inside = sorted(p for p in assets if any(p in t for t in texts))
    if inside:
        raise _Refused(
            Failure(
                "invalid_question",
                "media_in_question",
                f"this model reads media in the state only, not {', '.join(inside)} in the question",
            )
        )


def _media_failure(r: Request, card: ModelCard) -> Failure | None:
    kinds = sorted({a.type for a in r.assets.values()} - set(card.modalities))
    if not kinds:
        return None
    reads = ", ".join(card.modalities)
    return Failure(
        "invalid_input",
        "unsupported_media",
        f"this model reads {reads} only; the request carries {' and '.join(kinds)} assets",
    )


def _engine_question(q: Question, card: ModelCard) -> EngineQuestion:
    """The engine's form of one IR question; _Refused when this model cannot take it."""
    if q.type not in card.question_types:
        types = ", ".join(card.question_types)
        raise _Refused(
            Failure(
                "invalid_question", "unsupported_question_type", f"this model answers {types} questions, not {q.type}"
            )
        )
    for name in q.extensions:
        if name in REFUSED_FIELDS:
            raise _Refused(
                Failure(
                    "invalid_question",
                    "unsupported_field",
                    f"this model does not take {name}: it {REFUSED_FIELDS[name]}",
                )
            )
    instructions, criteria = q.instructions, q.criteria
    if q.preset_only:  # a 4.0 preset-only question: only a model trained on the preset can answer it
        if q.preset not in card.presets:
            trained = ", ".join(card.presets) or "none"
            raise _Refused(
                Failure(
                    "invalid_question",
                    "unsupported_preset",
                    (
                        f"this model has no head trained on preset {q.preset!r} (its presets: {trained}), and "
                        "the question has no instructions or criteria of its own"
                    ),
                )
            )
        preset = PRESETS[q.preset or ""]
        instructions, criteria = preset["instructions"], preset.get("criteria", MISSING)
    text = _text(instructions)
    if q.type == "noul":
        sides = criteria if isinstance(criteria, Mapping) else {}
        return NoulQuestion(text, _text(sides.get("true")), _text(sides.get("false")))
    if q.type == "choice":
        return ChoiceQuestion(tuple((str(name), _text(desc)) for name, desc in criteria.items()), text)
    if q.type == "score":
        return ScoreQuestion(tuple(plain(level) for level in criteria), text)
    labels = tuple((str(name), _text(desc)) for name, desc in criteria.items()) if isinstance(criteria, Mapping) else ()
    threshold = _float(q.extensions.get("threshold"))
    preset_name = q.preset if isinstance(q.preset, str) else None
    if q.type == "set":
        return SetQuestion(labels, text, threshold, preset_name)
    if q.type == "span":
        head = q.extensions.get("head")
        return SpanQuestion(labels, text, threshold, head if isinstance(head, str) else None, preset_name)
    if q.type == "box":
        return BoxQuestion(text)
    return TrackQuestion(text)


def _float(value: Any) -> float | None:
    return float(value.value) if isinstance(value, Number) else (None if value is None else float(value))


def _text(value: Any) -> Any:
    return None if value is MISSING or value is None else plain(value)


def _int_option(options: Mapping[str, Any] | None, name: str) -> int | None:
    value = (options or {}).get(name)
    return int(value.value) if isinstance(value, Number) else value


# ---------------------------------------------------------------------------- engine -> IR


def to_reply(
    plan: EnginePlan,
    results: Sequence[Result],
    model: str,
    extras: Mapping[str, Any] | None = None,
    legacy: bool = False,
) -> Reply:
    """``results`` answer ``plan.requests`` in order; ``extras`` go beside each response (meta).

    ``legacy``: the client speaks vllm-sr/4.0, whose responses have no ``span_heads``.
    """
    answered = iter(results)
    out = {}
    for name, item in plan.items.items():
        result = next(answered) if item.request is not None else None
        out[name] = _item_result(item, result, model, extras or {}, legacy)
    return Reply(out, model)


def _item_result(
    item: ItemPlan, result: Result | None, model: str, extras: Mapping[str, Any], legacy: bool
) -> ItemResult:
    tokens = result.usage.input_tokens if result is not None else 0
    over_budget = None
    if item.scan_budget is not None and tokens > item.scan_budget:
        over_budget = Failure(
            "scan_budget_exceeded",
            "scan_budget_exceeded",
            f"the model read {tokens} tokens, over the scan budget options.max_tokens = {item.scan_budget}",
        )
    partial = None
    if result is not None and not result.complete:
        partial = Failure(
            "invalid_input",
            "partial_input",
            "a video is read as the model's sample of its frames, not every frame, so the whole input was not read",
        )
    engine_answers = iter(enumerate(result.answers if result is not None else ()))
    truncated = result.truncated if result is not None else frozenset()
    answers: list[tuple[str, Any]] = []
    members: dict[str, list[tuple[str, Any]]] = {"spans": [], "sets": [], "thresholds": [], "span_heads": []}
    for q_id, kind in item.questions.items():
        cut = False
        if q_id in item.failures:
            answer: Answer | QuestionError | Failure = item.failures[q_id]
        else:
            index, answer = next(engine_answers)
            cut = index in truncated
        if over_budget is not None and not isinstance(answer, Failure):
            answer = over_budget
        if partial is not None and q_id in item.full_input and not isinstance(answer, Failure):
            answer = partial
        if cut and q_id in item.full_input and not isinstance(answer, Failure):
            answer = Failure(
                "invalid_input",
                "partial_input",
                "overflow: truncate read only the state's first tokens, so the whole input was not read",
            )
        answers.append((q_id, _answer_doc(q_id, kind, answer, q_id in item.full_input, cut)))
        if isinstance(answer, SetAnswer):
            members["sets"].append(
                (q_id, JsonObject([("probabilities", JsonObject(answer.probabilities)), ("selected", answer.selected)]))
            )
            members["thresholds"].append((q_id, answer.threshold))
            if answer.composite:  # each label also answers as a noul of its own (seed 002)
                answers += [
                    (f"{q_id}.{label}", JsonObject([("type", "noul"), ("noul", p)]))
                    for label, p in answer.probabilities
                ]
        elif isinstance(answer, SpanAnswer):
            members["spans"].append((q_id, tuple(_span_doc(span) for span in answer.spans)))
            members["thresholds"].append((q_id, answer.threshold))
            members["span_heads"].append((q_id, answer.head))
    if legacy:
        members.pop("span_heads")
    response = [(name, JsonObject(entries)) for name, entries in members.items() if entries]
    if item.return_meta:  # what was read and how, then the caller's timings
        read = [("tokens_read", tokens), ("state_cache_hit", result is not None and result.state_cache_hit)]
        response.append(("meta", JsonObject([*read, *dict(extras.get("meta") or {}).items()])))
    response += [(k, v) for k, v in extras.items() if k != "meta"]
    usage = JsonObject([("input_tokens", tokens), ("output_tokens", 0)])
    return ItemResult(JsonObject(answers), usage, JsonObject(response), model)


def _span_doc(span: Span) -> JsonObject:
    return JsonObject(
        [
            ("label", span.label),
            ("start", span.start),
            ("end", span.end),
            ("text", span.text),
            ("probability", span.probability),
        ]
    )


def _box_doc(box: Box) -> JsonObject:
    return JsonObject([("top", box.top), ("bottom", box.bottom), ("left", box.left), ("right", box.right)])


def _answer_doc(
    q_id: str, kind: str, answer: Answer | QuestionError | Failure, full_input: bool, cut: bool = False
) -> JsonObject:
    if isinstance(answer, QuestionError):
        answer = Failure(answer.code, answer.reason or REASONS.get(answer.code, answer.code), answer.message)
    if isinstance(answer, Failure):
        message = f'question "{q_id}" cannot be answered: {answer.message}'
        return JsonObject([("type", kind), ("error", answer.code), ("reason", answer.reason), ("message", message)])
    members: list[tuple[str, Any]] = [("type", answer.type)]
    if isinstance(answer, NoulAnswer):
        members.append(("noul", answer.noul))
        if answer.abstain_probability is not None:
            members.append(("abstain_probability", answer.abstain_probability))
    elif isinstance(answer, ChoiceAnswer):
        members += [
            ("choice", answer.choice),
            ("probabilities", JsonObject(answer.probabilities)),
            ("confidence", answer.confidence),
        ]
        if answer.abstain_probability is not None:
            members.append(("abstain_probability", answer.abstain_probability))
    elif isinstance(answer, ScoreAnswer):
        members += [
            ("score", answer.score),
            ("legend", JsonObject((str(i), level) for i, level in enumerate(answer.legend))),
            ("probabilities", JsonObject((str(i), p) for i, p in enumerate(answer.probabilities))),
            ("confidence", answer.confidence),
        ]
        if answer.abstain_probability is not None:
            members.append(("abstain_probability", answer.abstain_probability))
    elif isinstance(answer, BoxAnswer):
        members += [("box", _box_doc(answer.box)), ("confidence", answer.confidence)]
    elif isinstance(answer, TrackAnswer):
        members += [
            ("track", tuple(JsonObject([("at", at), ("box", _box_doc(box))]) for at, box in answer.track)),
            ("confidence", answer.confidence),
        ]
    # set and span answers are in the response's sets and spans, beside the answers (seed 002)
    if cut:  # overflow: truncate read the state's first tokens only
        members.append(("input_coverage", "partial"))
    elif full_input:  # only overflow: truncate cuts the text; every other answer read all of it
        members.append(("input_coverage", "complete"))
    return JsonObject(members)
