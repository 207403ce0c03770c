"""An LLM request -> the System One request(s) the Decide path sends, and their answers back. No I/O.

    parts = parts_of(api, body)               # the conversation's parts, by seed 000's names
    calls = build_calls(plan, parts)          # one DecideCall per decision model (usually one)
    answers = read_answers(call, result)      # per signal: an Answer, or unknown and why

The sidecar calls ``parts_of`` and ``build_calls`` on an LLM request whose ``model`` is a
virtual model, sends each call's ``request`` (a systemone IR ``Request``; nothing when
``call.empty``) with the client codec of a member of ``call.model``
(``REGISTRY.client(schema).plan(...)``), and hands each reply, or the error that ended the call,
to ``read_answers``. ``vllm-sr route`` does the same over HTTP.

One state holds every part any of the call's signals reads, with explicit roles (request: user;
answer: answer; the others: context, as the models were trained and calibrated), so the runtime
computes the state once for all of the call's questions. A model family that reads the state
whole (Decision, this product's runtime) reads every part the call carries: ``input`` says which
parts a call carries, not which ones each question sees.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sr_control.config.model import Signal
from sr_control.decide.rules import Answer, VirtualModelPlan
from systemone.generated.fields import IMPLICIT_ROLES, PRESETS
from systemone.ir import MISSING, Asset, ItemResult, Question, Request, Roles
from systemone.jsontext import JsonObject, Number, freeze

# The state's part names, in the order the state holds them (seed 000 rule 6).
PART_ORDER = (
    "request",
    "history",
    "previous_turns",
    "previous_answer",
    "tool_results",
    "candidate",
    "answer",
    "context",
)
LLM_APIS = ("chat_completions", "responses", "messages")
_DATA_URL = re.compile(r"^data:(image|video)/([A-Za-z0-9.+-]+);base64,(.*)$", re.S)


@dataclass(frozen=True, slots=True)
class Media:
    kind: str  # image | video
    format: str  # png, jpeg, mp4 ...
    data_base64: str


@dataclass(frozen=True, slots=True)
class Parts:
    """The conversation's parts as text (absent when the conversation has none), and the media
    of the request turn (data URLs and base64 blocks; a remote URL is not fetched)."""

    text: Mapping[str, str]
    media: tuple[Media, ...] = ()

    def with_answer(self, answer: str) -> Parts:
        return Parts({**self.text, "answer": answer}, self.media)


@dataclass(frozen=True)
class DecideCall:
    """One System One request to one decision model, asking several signals at once."""

    model: str  # the decision model (a pool such as vllm-sr/auto, or a deployment's model)
    request: Request
    signals: tuple[str, ...]  # the question ids, which are the signals' names
    deadline_ms: int  # the longest timeout_ms of its signals
    kinds: Mapping[str, str] = field(default_factory=dict)  # signal -> its question type

    @property
    def empty(self) -> bool:
        """The conversation has none of the parts its signals read: nothing to send; its
        signals are unknown (``read_answers(call, None, EMPTY)``)."""
        return not self.request.state and not self.request.media


EMPTY = "the conversation has none of the parts its signals read"


class NotAConversation(ValueError):
    """The body is not a request of the API it was sent to (no messages, no input)."""


# ---------------------------------------------------------------------------- LLM body -> parts


def parts_of(api: str, body: Mapping[str, Any]) -> Parts:
    """The parts of a chat_completions, responses or messages request body (parsed JSON)."""
    if api == "chat_completions":
        return _chat(body)
    if api == "responses":
        return _responses(body)
    if api == "messages":
        return _messages(body)
    raise ValueError(f"the Decide path reads chat_completions, responses and messages requests, not {api}")


def _turns_to_parts(context: list[str], turns: list[tuple[str, str, list[Media]]], tools: list[str]) -> Parts:
    """``turns``: (speaker, text, media) of user and assistant messages, oldest first."""
    last_user = max((i for i, (who, _, _) in enumerate(turns) if who == "user"), default=None)
    text: dict[str, str] = {}
    media: list[Media] = []
    if last_user is not None:
        _, said, media = turns[last_user]
        text["request"] = said
        before = turns[:last_user]
        history = [t for who, t, _ in before if who == "user" and t]
        if history:
            text["history"] = "\n".join(history)
        lines = [f"{who}: {t}" for who, t, _ in before if t]
        if lines:
            text["previous_turns"] = "\n".join(lines)
        answers = [t for who, t, _ in before if who == "assistant" and t]
        if answers:
            text["previous_answer"] = answers[-1]
    if tools:
        text["tool_results"] = "\n".join(tools)
    if context:
        text["context"] = "\n\n".join(context)
    return Parts({k: v for k, v in text.items() if v}, tuple(media))


def _chat(body: Mapping[str, Any]) -> Parts:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise NotAConversation("a chat_completions request has a messages list")
    context: list[str] = []
    turns: list[tuple[str, str, list[Media]]] = []
    tools: list[str] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        role, content = m.get("role"), m.get("content")
        said, media = _openai_content(content)
        if role in ("system", "developer"):
            context.append(said)
        elif role in ("tool", "function"):
            tools.append(said)
        elif role in ("user", "assistant"):
            turns.append((role, said, media))
    return _turns_to_parts([c for c in context if c], turns, [t for t in tools if t])


def _openai_content(content: Any) -> tuple[str, list[Media]]:
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    media: list[Media] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in ("image_url", "video_url", "input_image"):
            url = part.get(kind) if kind != "input_image" else part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            found = _data_url(url)
            if found is not None:
                media.append(found)
    return "\n".join(texts), media


def _data_url(url: Any) -> Media | None:
    match = _DATA_URL.match(url) if isinstance(url, str) else None
    if match is None:
        return None
    kind, fmt, data = match.groups()
    return Media(kind, fmt.lower(), data)


def _responses(body: Mapping[str, Any]) -> Parts:
    given = body.get("input")
    if given is None:
        raise NotAConversation("a responses request has an input")
    context = [body["instructions"]] if isinstance(body.get("instructions"), str) and body["instructions"] else []
    turns: list[tuple[str, str, list[Media]]] = []
    tools: list[str] = []
    for item in [{"role": "user", "content": given}] if isinstance(given, str) else given:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call_output":
            output = item.get("output")
            tools.append(output if isinstance(output, str) else _openai_content(output)[0])
            continue
        role = item.get("role")
        said, media = _openai_content(item.get("content"))
        if role in ("system", "developer"):
            context.append(said)
        elif role in ("user", "assistant"):
            turns.append((role, said, media))
    return _turns_to_parts([c for c in context if c], turns, [t for t in tools if t])


def _messages(body: Mapping[str, Any]) -> Parts:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise NotAConversation("a messages request has a messages list")
    system = body.get("system")
    context = [system] if isinstance(system, str) else [_anthropic_content(system)[0]] if system else []
    turns: list[tuple[str, str, list[Media]]] = []
    tools: list[str] = []
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            continue
        content = m.get("content")
        said, media = _anthropic_content(content)
        results = [_anthropic_content(b.get("content"))[0] for b in _blocks(content) if b.get("type") == "tool_result"]
        tools += results
        if m["role"] == "user" and not said and results:
            continue  # a turn of tool results only: the user's request is the turn before
        turns.append((m["role"], said, media))
    return _turns_to_parts([c for c in context if c], turns, [t for t in tools if t])


def _blocks(content: Any) -> Iterable[dict[str, Any]]:
    return (b for b in content if isinstance(b, dict)) if isinstance(content, list) else ()


def _anthropic_content(content: Any) -> tuple[str, list[Media]]:
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    media: list[Media] = []
    for block in _blocks(content):
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "image":
            source = block.get("source")
            if isinstance(source, dict) and source.get("type") == "base64":
                fmt = str(source.get("media_type", "")).rsplit("/", 1)[-1].lower()
                media.append(Media("image", fmt, str(source.get("data", ""))))
    return "\n".join(texts), media


def answer_text(api: str, response: Mapping[str, Any]) -> str:
    """The text an LLM answered (its response body, parsed), for a judge's ``answer`` part."""
    if api == "chat_completions":
        choices = response.get("choices") or []
        message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        return _openai_content(message.get("content"))[0] if isinstance(message, dict) else ""
    if api == "responses":
        texts = [
            _openai_content(item.get("content"))[0]
            for item in response.get("output") or ()
            if isinstance(item, dict) and item.get("type") == "message"
        ]
        return "\n".join(t for t in texts if t)
    if api == "messages":
        return _anthropic_content(response.get("content"))[0]
    raise ValueError(f"no answer text in a {api} response")


# ---------------------------------------------------------------------------- parts -> calls


@dataclass(frozen=True, slots=True)
class Asked:
    """What one decision model is asked, the same for every request: built once per plan."""

    model: str
    signals: tuple[str, ...]
    questions: Mapping[str, Question]
    kinds: Mapping[str, str]
    wanted: frozenset[str]  # the parts (and media kinds) its signals read
    deadline_ms: int  # the longest timeout_ms of its signals


def build_calls(plan: VirtualModelPlan, parts: Parts, *, judge: bool = False) -> tuple[DecideCall, ...]:
    """One call per decision model that the virtual model's signals ask (one, when every signal
    asks the same model: the default ``vllm-sr/auto``). ``judge``: the judges' signals, asked
    once the LLM has answered (``parts.with_answer(...)``)."""
    key = ("asked", judge)
    asks = plan.memo.get(key)
    if asks is None:
        signals = plan.judge_signals if judge else plan.signals
        by_model: dict[str, dict[str, Signal]] = {}
        for name, signal in signals.items():
            if signal.asks_model:
                by_model.setdefault(signal.model, {})[name] = signal
        asks = plan.memo[key] = tuple(asked_of(model, asked) for model, asked in by_model.items())
    return tuple(_call(a, parts) for a in asks)


def call_for(model: str, signals: Mapping[str, Signal], parts: Parts) -> DecideCall:
    """One request asking ``signals`` (name -> signal) of ``model`` about ``parts``."""
    return _call(asked_of(model, signals), parts)


def asked_of(model: str, signals: Mapping[str, Signal]) -> Asked:
    return Asked(
        model,
        tuple(signals),
        {name: question(s) for name, s in signals.items()},
        {n: kind_of(s) for n, s in signals.items()},
        frozenset(p for s in signals.values() for p in s.input),
        max(s.timeout_ms for s in signals.values()),
    )


def _call(asked: Asked, parts: Parts) -> DecideCall:
    wanted = asked.wanted
    state = JsonObject((p, parts.text[p]) for p in PART_ORDER if p in wanted and parts.text.get(p))
    roles = Roles("explicit", JsonObject((p, IMPLICIT_ROLES[p]) for p in state))
    media = [m for m in parts.media if m.kind in wanted]
    assets = {f"⟦{'img' if m.kind == 'image' else 'vid'}-{i}⟧": m for i, m in enumerate(media, 1)}
    request = Request(
        state=state,
        questions=asked.questions,
        roles=roles,
        model=asked.model,
        assets={
            p: Asset(m.kind, JsonObject([("type", m.kind), ("format", m.format), ("data_base64", m.data_base64)]))
            for p, m in assets.items()
        },
        media=tuple(assets),
        media_member="state" if assets else "",
        options=JsonObject([("deadline_ms", Number(str(asked.deadline_ms)))]),
    )
    return DecideCall(asked.model, request, asked.signals, asked.deadline_ms, asked.kinds)


def kind_of(signal: Signal) -> str:
    if signal.keyword is not None:
        return "keyword"
    if signal.type is not None:
        return signal.type
    return str(PRESETS[signal.preset or ""]["type"])


def question(signal: Signal) -> Question:
    """The signal as a complete standard question: a preset keeps its own instructions and
    criteria, so a server without the preset answers it too (seed 000 rule 2)."""
    preset = PRESETS.get(signal.preset or "", {})
    instructions = signal.instructions if signal.instructions is not None else preset.get("instructions", MISSING)
    criteria: Any = signal.criteria if signal.criteria is not None else preset.get("criteria", MISSING)
    extensions = JsonObject([("preset", signal.preset)]) if signal.preset is not None else JsonObject()
    return Question(
        kind_of(signal), instructions, freeze(criteria) if criteria is not MISSING else MISSING, extensions=extensions
    )


# ---------------------------------------------------------------------------- replies -> answers


def read_answers(call: DecideCall, result: ItemResult | None, failure: str | None = None) -> dict[str, Answer]:
    """Each of the call's signals from the decoded reply (``SchemaCodec.decode_reply`` /
    ``assemble``); an error of the whole call (``result.error``, or ``failure``: a timeout, a
    refused connection) makes every one of its signals unknown, with the reason."""
    if failure is None and result is not None and result.error is not None:
        failure = f"{result.error.code}: {result.error.message}"
    if result is None and failure is None:
        failure = "no reply"
    out: dict[str, Answer] = {}
    for name in call.signals:
        kind = call.kinds.get(name, "noul")
        if failure is not None or result is None:
            out[name] = Answer.missing(kind, failure or "no reply")
            continue
        out[name] = _answer(name, kind, result)
    return out


def _answer(name: str, kind: str, result: ItemResult) -> Answer:
    answer = result.answers.get(name)
    if not isinstance(answer, Mapping):
        return Answer.missing(kind, "the model gave no answer to it")
    if "error" in answer:
        return Answer.missing(kind, f"{answer['error']}: {answer.get('message', '')}".rstrip(": "))
    try:
        if kind == "noul":
            return Answer(kind, _number(answer["noul"]))
        if kind == "score":
            return Answer(kind, _number(answer["score"]))
        if kind == "choice":
            return Answer(kind, str(answer["choice"]))
        if kind == "set":
            selected = (result.extras.get("sets") or {}).get(name, {}).get("selected")
            return Answer(kind, frozenset(str(x) for x in selected))
        if kind == "span":
            spans = (result.extras.get("spans") or {}).get(name)
            if spans is None:
                raise KeyError(name)
            return Answer(kind, frozenset(str(s["label"]) for s in spans))
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    return Answer.missing(kind, f"the model's answer is not a {kind} answer")


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError("a boolean is no number here")
    return float(value.value if isinstance(value, Number) else value)


__all__ = [
    "LLM_APIS",
    "PART_ORDER",
    "EMPTY",
    "DecideCall",
    "Media",
    "NotAConversation",
    "Parts",
    "answer_text",
    "build_calls",
    "call_for",
    "kind_of",
    "parts_of",
    "question",
    "read_answers",
]
