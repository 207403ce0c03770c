"""Writing the IR out: the internal wire form, and standard requests for a target schema.

    internal_doc(ir) -> JSON object      lossless: what the internal reading read, written back
    internal_body(ir, model=...) -> bytes    the same as bytes; model: the pool member's, for every one named
    request_doc(request, "vllm-sr/5.0" | "systemone/0.2", model=...) -> JSON object

The internal form is the 4.0 request form plus ``roles`` (absent: 4.0 implicit roles; null: no
roles), ``media`` (placeholders read before the state) and ``requests`` batches. It keeps member
order, 4.0 spellings and number literals, so a request it reads is written back byte for byte.

A standard request is what a client codec sends: 4.0 spellings become ``criteria`` and
``assets``, implicit roles become the explicit map that reproduces them, a preset-only question
gets the canonical preset's instructions and criteria. For systemone/0.2 the extension fields are
left out by the generated strip list, and what 0.2 cannot carry raises UnsupportedCapability.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from systemone.errors import UnsupportedCapability
from systemone.generated.fields import IMPLICIT_ROLES, PRESETS
from systemone.generated.strip import REFUSE, STRIP
from systemone.ir import MISSING, Batch, Question, Request
from systemone.jsontext import JsonObject, dumpb_content, dumps_layout, freeze

_REQUEST_ORDER = ("model", "state", "states", "roles", "questions", "assets", "images", "videos", "media", "options")
_INLINE = {"image": ("images", "⟦img-{}⟧"), "video": ("videos", "⟦vid-{}⟧")}


def _ordered(order: tuple[str, ...], members: dict[str, Any]) -> JsonObject:
    """``members`` in the client's order, then any new ones in the standard's order."""
    if len(order) == len(members):  # the usual case: the members are the client's, in C
        try:
            return JsonObject(zip(order, map(members.__getitem__, order)))
        except KeyError:
            pass
    out: list[tuple[str, Any]] = [(name, members[name]) for name in order if name in members]
    seen = {name for name, _ in out}
    out += [(name, value) for name, value in members.items() if name not in seen]
    return JsonObject(out)


# ---------------------------------------------------------------------------- internal form


def internal_body(ir: Request | Batch, model: str | None = None) -> bytes:
    """The internal form as bytes: what ``dumpb(internal_doc(ir))`` writes, written in C.

    With ``model``, the body for the pool member chosen to answer: every model name the request
    gives (a batch's, its requests') becomes ``model``; a request that names none still names
    none. The IR is one a listener codec read, whose numbers are ``Number`` literals.
    """
    if model is not None and renames(ir, model):
        ir = _with_model(ir, model)
    elif isinstance(ir, Request) and ir.source is not None:
        wire = dumps_layout(ir.source)
        if ir.roles.mode == "none" and "roles" not in ir.order:
            wire = wire[:-1] + b', "roles": null}'  # as _internal_request adds it: last
        return wire
    return dumpb_content(internal_doc(ir))


def renames(ir: Request | Batch, model: str) -> bool:
    """Whether ``ir`` gives a model name other than ``model``, which ``internal_body`` replaces."""
    if isinstance(ir, Request):
        return ir.model is not None and ir.model != model
    return any(m is not None and m != model for m in (ir.model, *(r.model for r in ir.items.values())))


def _with_model(ir: Request | Batch, model: str) -> Request | Batch:
    if isinstance(ir, Request):
        return ir if ir.model is None else replace(ir, model=model)
    named = {name: r if r.model is None else replace(r, model=model) for name, r in ir.items.items()}
    return replace(ir, model=None if ir.model is None else model, items=MappingProxyType(named))


def internal_doc(ir: Request | Batch) -> JsonObject:
    if isinstance(ir, Request):
        return _internal_request(ir, states=None)
    if ir.form == "states":
        template = next(iter(ir.items.values())).with_(options=ir.options, long_context=ir.long_context)
        return _internal_request(template, states=tuple(r.state for r in ir.items.values()))
    members: dict[str, Any] = {}
    if ir.model is not None:
        members["model"] = ir.model
    members["requests"] = JsonObject((name, _internal_request(r, None)) for name, r in ir.items.items())
    options = _with_long_context(ir.options, ir.long_context)
    if options is not None:
        members["options"] = options
    return _ordered(ir.order, members)


def _internal_request(r: Request, states: tuple[Any, ...] | None) -> JsonObject:
    members: dict[str, Any] = {}
    if r.model is not None:
        members["model"] = r.model
    if states is not None:
        members["states"] = states
    else:
        members["state"] = r.state
    if r.roles.mode == "explicit":
        members["roles"] = r.roles.mapping
    elif r.roles.mode == "none":
        members["roles"] = None
    members["questions"] = JsonObject((q_id, _internal_question(q)) for q_id, q in r.questions.items())
    if r.assets_member == "inline":
        for kind, (member, _) in _INLINE.items():
            entries = tuple(a.members for a in r.assets.values() if a.type == kind)
            if entries:
                members[member] = entries
    elif r.assets:
        members["assets"] = JsonObject((p, a.members) for p, a in r.assets.items())
    if r.media and r.media_member in ("state", "media"):
        members["media"] = r.media
    options = _with_long_context(r.options, r.long_context)
    if options is not None:
        members["options"] = options
    return _ordered(r.order, members)


def _with_long_context(options: JsonObject | None, long_context: bool) -> JsonObject | None:
    if not long_context or (options is not None and options.get("long_context") is True):
        return options
    return JsonObject([*(options or {}).items(), ("long_context", True)])


def _internal_question(q: Question) -> Any:
    if q.problem is not None:
        return q.raw
    if q.as_read is not None:
        return q.as_read
    members: dict[str, Any] = {"type": q.type}
    if q.instructions is not MISSING:
        members["instructions"] = q.instructions
    if q.criteria is not MISSING:
        members[q.criteria_member] = _spelled(q.criteria, q.criteria_member)
    members.update(q.extensions)
    return _ordered(q.order, members)


def _spelled(criteria: Any, member: str) -> Any:
    if member in ("choices", "labels"):
        return tuple(criteria)
    return criteria


# ---------------------------------------------------------------------------- standard requests


def request_doc(r: Request, schema: str, model: str | None = None, options: JsonObject | None = None) -> JsonObject:
    """One standard request for ``schema`` (vllm-sr/5.0 or systemone/0.2)."""
    standard = schema == "systemone/0.2"
    members: dict[str, Any] = {}
    if model or r.model:
        members["model"] = model or r.model
    media, assets = _assets(r, standard)
    members["state"] = (*media, r.state) if media else r.state
    if not standard:
        roles = _roles(r)
        if roles is not None:
            members["roles"] = roles
    members["questions"] = JsonObject(
        (q_id, question_doc(q, standard)) for q_id, q in r.questions.items() if q.problem is None
    )
    if assets:
        members["assets"] = assets
    if not standard and options:
        members["options"] = options
    return JsonObject(members)


def _roles(r: Request) -> JsonObject | None:
    if r.roles.mode == "explicit":
        return r.roles.mapping
    if r.roles.mode == "implicit" and isinstance(r.state, dict) and r.state:
        # The explicit map that reproduces 4.0's implicit roles exactly (seed 000, risks).
        return JsonObject((k, IMPLICIT_ROLES.get(k, "user")) for k in r.state)
    return None


def _assets(r: Request, standard: bool) -> tuple[tuple[str, ...], JsonObject | None]:
    if not r.assets:
        return (), None
    for p, a in r.assets.items():
        if standard and a.type in REFUSE["asset_type"]:
            raise UnsupportedCapability(f"systemone/0.2 cannot carry {a.type} assets ({p})", reason="video")
    if r.assets_member == "inline":
        assets = JsonObject((p, JsonObject([("type", a.type), *a.members.items()])) for p, a in r.assets.items())
    else:
        assets = JsonObject((p, a.members) for p, a in r.assets.items())
    return r.media, assets


def question_doc(q: Question, standard: bool) -> JsonObject:
    if standard and q.type in REFUSE["question_type"]:
        raise UnsupportedCapability(f"systemone/0.2 cannot carry {q.type} questions", reason=f"{q.type}_question")
    instructions, criteria = q.instructions, q.criteria
    if q.preset_only:
        preset = PRESETS[q.preset or ""]
        instructions, criteria = preset["instructions"], freeze(preset.get("criteria", MISSING))
    members: dict[str, Any] = {"type": q.type}
    if instructions is not MISSING:
        members["instructions"] = instructions
    if criteria is not MISSING:
        members["criteria"] = criteria
    for name, value in q.extensions.items():
        if standard and name in REFUSE["question"]:
            raise UnsupportedCapability(f"systemone/0.2 cannot carry the question field {name}", reason=name)
        if standard and name in STRIP["question"]:
            continue
        members[name] = value
    return JsonObject(members)


def refusals(r: Request) -> Iterator[str]:
    """What in ``r`` a systemone/0.2 target cannot carry, one line each."""
    for p, a in r.assets.items():
        if a.type in REFUSE["asset_type"]:
            yield f"{a.type} asset {p}"
    for q_id, q in r.questions.items():
        if q.type in REFUSE["question_type"]:
            yield f"{q.type} question {q_id}"
        for name in q.extensions:
            if name in REFUSE["question"]:
                yield f"{name} on question {q_id}"
