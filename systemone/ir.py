"""The schema-independent representation every conversion goes through (seed 000, "IR").

A ``Request`` is one state and its questions; a ``Batch`` is named requests (the batch endpoint's
``requests``, or a 4.0 ``states`` list over one question set). JSON content (state, instructions,
criteria, options) is kept as read: objects in member order, number literals as written (see
``jsontext``). Each node also remembers how the client spelled it (``criteria_member``,
``assets_member``, member ``order``) so the internal wire form can write back exactly what it
read; writers for other schemas ignore the spelling.

Roles come in three modes: ``implicit`` (4.0: the state's keys say who speaks), ``none`` (5.0
without roles: the whole state is user content) and ``explicit`` (a ``roles`` map).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from systemone.errors import ErrorInfo
from systemone.generated.fields import IMPLICIT_ROLES
from systemone.jsontext import JsonObject, Number


class _Missing:
    """An absent member, as opposed to a member whose value is null."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()
EMPTY: Mapping[str, Any] = MappingProxyType({})

RoleMode = Literal["implicit", "none", "explicit"]
BatchForm = Literal["requests", "states"]
Endpoint = Literal["systemone", "batch", "decisions"]


def frozen_map(pairs: Any) -> Mapping[str, Any]:
    return MappingProxyType(dict(pairs))


@dataclass(frozen=True, slots=True)
class Roles:
    mode: RoleMode
    mapping: JsonObject | None = None  # explicit: state key -> user | context | answer

    def of(self, state: Any) -> dict[str, str]:
        """The role of each key of an object state (every mode reduced to explicit)."""
        if not isinstance(state, dict):
            return {}
        if self.mode == "explicit" and self.mapping is not None:
            return {k: self.mapping.get(k, "user") for k in state}
        if self.mode == "implicit":
            return {k: IMPLICIT_ROLES.get(k, "user") for k in state}
        return {k: "user" for k in state}


NO_ROLES = Roles("none")
IMPLICIT = Roles("implicit")


@dataclass(frozen=True, slots=True)
class Asset:
    type: str  # image | video
    members: JsonObject  # format, data_base64, part as written (with type when it was written)


@dataclass(frozen=True, slots=True)
class Question:
    type: str
    instructions: Any = MISSING
    criteria: Any = MISSING  # the standard's form; 4.0 choices and labels become {name: null}
    criteria_member: str = "criteria"  # criteria | choices | levels | labels
    extensions: JsonObject = field(default_factory=JsonObject)  # preset, over, ... as written
    order: tuple[str, ...] = ()  # member names in client order
    problem: ErrorInfo | None = None  # /v1/decisions: the question failed reading
    raw: Any = None  # the question as written, kept when ``problem`` is set
    # The question as read, when that object is exactly what the internal form writes for it
    # (the reader sets it): the writer then reuses it. It is no __init__ argument, so a
    # ``replace`` that changes the question drops it.
    as_read: JsonObject | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def preset(self) -> str | None:
        return self.extensions.get("preset")

    @property
    def preset_only(self) -> bool:
        return self.preset is not None and self.instructions is MISSING and self.criteria is MISSING


# The readers build a Question for each question of each request. A frozen dataclass's __init__
# sets each slot through object.__setattr__; ``read_question`` sets them through their
# descriptors, which is the same at half the cost (tests/systemone/test_ir.py holds the two
# equal, field for field).
QUESTION_SLOTS = (
    "type",
    "instructions",
    "criteria",
    "criteria_member",
    "extensions",
    "order",
    "problem",
    "raw",
    "as_read",
)
(
    _set_type,
    _set_instructions,
    _set_criteria,
    _set_member,
    _set_extensions,
    _set_order,
    _set_problem,
    _set_raw,
    _set_as_read,
) = (getattr(Question, name).__set__ for name in QUESTION_SLOTS)


def read_question(
    type_: str,
    instructions: Any,
    criteria: Any,
    criteria_member: str,
    extensions: JsonObject,
    order: tuple[str, ...],
    as_read: JsonObject | None,
) -> Question:
    """``Question(type_, instructions, criteria, criteria_member, extensions, order)``, read
    without a problem, with ``as_read`` set."""
    q = object.__new__(Question)
    _set_type(q, type_)
    _set_instructions(q, instructions)
    _set_criteria(q, criteria)
    _set_member(q, criteria_member)
    _set_extensions(q, extensions)
    _set_order(q, order)
    _set_problem(q, None)
    _set_raw(q, None)
    _set_as_read(q, as_read)
    return q


@dataclass(frozen=True, slots=True)
class Request:
    state: Any
    questions: Mapping[str, Question]
    roles: Roles = NO_ROLES
    model: str | None = None
    assets: Mapping[str, Asset] = field(default_factory=lambda: EMPTY)
    assets_member: str = "assets"  # assets | inline (4.0 images and videos)
    media: tuple[str, ...] = ()  # placeholders read before the state (5.0 media rule, 4.0 inline)
    media_member: str = ""  # "" none | state (5.0 media rule) | media (internal form) | inline
    options: JsonObject | None = None
    long_context: bool = False  # the standard header, or 4.0 options.long_context
    order: tuple[str, ...] = ()
    # The client's text, when it is this request's internal form but for the layout and the
    # ``roles: null`` the internal form adds (the reader sets it): ``internal_body`` writes from
    # it. It is no __init__ argument, so a ``replace`` (another model, the long-context header)
    # drops it.
    source: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def with_(self, **changes: Any) -> Request:
        return replace(self, **changes)

    @property
    def deadline_ms(self) -> int | None:
        return _deadline(self.options)


@dataclass(frozen=True, slots=True)
class Batch:
    items: Mapping[str, Request]
    form: BatchForm = "requests"
    model: str | None = None
    options: JsonObject | None = None
    long_context: bool = False
    order: tuple[str, ...] = ()

    @property
    def deadline_ms(self) -> int | None:
        return _deadline(self.options)


# The longest deadline honoured as such (about 24 days). The schemas set no maximum, so a longer
# one is valid and means "no deadline that matters"; capping it keeps the time arithmetic of
# whoever reads it finite (a 400-digit deadline_ms overflowed a float into a 500).
MAX_DEADLINE_MS = 2**31 - 1


def _deadline(options: JsonObject | None) -> int | None:
    value = options.get("deadline_ms") if options is not None else None
    if value is None:
        return None
    return min(int(value.value if isinstance(value, Number) else value), MAX_DEADLINE_MS)


def items(ir: Request | Batch) -> Iterator[tuple[str, Request]]:
    """Named requests: a single request is the batch of one item named ""."""
    if isinstance(ir, Batch):
        yield from ir.items.items()
    else:
        yield "", ir


@dataclass(frozen=True, slots=True)
class ItemResult:
    """What one request got: its answers (and response members) or one error."""

    answers: JsonObject = field(default_factory=JsonObject)
    usage: JsonObject | None = None
    extras: JsonObject = field(default_factory=JsonObject)  # spans, sets, thresholds, meta, ...
    model: str | None = None
    error: ErrorInfo | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """The answers to a ClientRequest's IR, in its shape (one item, named requests, states)."""

    items: Mapping[str, ItemResult]
    model: str | None = None
    usage: JsonObject | None = None  # a batch's total as the upstream gave it; else summed


@dataclass(frozen=True, slots=True)
class ListingItem:
    name: str
    description: str = ""
    release_date: str = ""
    extensions: JsonObject = field(default_factory=JsonObject)  # version, features, card


@dataclass(frozen=True, slots=True)
class Listing:
    models: tuple[ListingItem, ...]


def describe(ir: Request | Batch) -> dict[str, Any]:
    """A JSON view of the IR for people (``vllm-sr systemone check``); not a wire form."""
    if isinstance(ir, Batch):
        return {
            "kind": "batch",
            "form": ir.form,
            "model": ir.model,
            "options": ir.options,
            "long_context": ir.long_context,
            "requests": {name: describe(r) for name, r in ir.items.items()},
        }
    return {
        "kind": "request",
        "model": ir.model,
        "state": ir.state,
        "roles": {"mode": ir.roles.mode, "of_state_keys": ir.roles.of(ir.state)}
        if isinstance(ir.state, dict)
        else {"mode": ir.roles.mode},
        "media": list(ir.media),
        "assets": {
            p: {"type": a.type, **{k: v for k, v in a.members.items() if k != "data_base64"}}
            for p, a in ir.assets.items()
        },
        "questions": {q_id: _describe_question(q) for q_id, q in ir.questions.items()},
        "options": ir.options,
        "long_context": ir.long_context,
    }


def _describe_question(q: Question) -> dict[str, Any]:
    if q.problem is not None:
        return {"type": q.type, "problem": q.problem.message}
    out: dict[str, Any] = {"type": q.type}
    if q.instructions is not MISSING:
        out["instructions"] = q.instructions
    if q.criteria is not MISSING:
        out["criteria"] = q.criteria
        if q.criteria_member != "criteria":
            out["spelled_as"] = q.criteria_member
    out.update(q.extensions)
    if q.preset_only:
        out["preset_only"] = True
    return out
