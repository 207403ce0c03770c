"""Reading a request body into the IR, under one schema's rules (seed 000, seed 002).

    read_body(body, READINGS["vllm-sr/5.0"], "systemone") -> (Request | Batch, legacy forms)

The rules, in the order they are applied:

1. A body over 32 MiB: 413 ``request_too_large``. Text that is not one JSON object: 422.
2. Members the schema does not define, anywhere: 400 ``invalid_request`` naming every one. The
   bare ``systemone/0.2`` reading follows the standard instead (unknown members are ignored)
   except for vllm-sr extension fields, which it refuses, since it would not honour them.
3. Shapes and limits (2-255 options, 1-255 labels, 2-10 levels): 422 with one ``detail`` entry
   per problem. On /v1/decisions a question that fails here does not fail the request: it is
   kept with its problem, and only a request with no valid question is refused (400).

A ``Reading`` is a table built from the generated field tables; the legacy reading (vllm-sr/4.0
and the internal form) accepts every 4.0-only form, records which it met, and keeps the 4.0
reading of the two forms 5.0 reads differently (implicit roles, a media array state).

Most bodies take a shorter way to the same IR: msgspec reads the text (``jsontext.read_plain``)
and checks the common form (``fastread``) in C. This module reads the rest, and is the one that
explains every problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from systemone import fastread
from systemone.errors import (
    MAX_BODY_BYTES,
    DetailItem,
    InvalidRequest,
    RequestTooLarge,
    UnknownMembers,
    ValidationFailed,
)
from systemone.found import Found, Loc, check_members
from systemone.generated import fields as F
from systemone.ir import IMPLICIT, MISSING, NO_ROLES, Batch, Endpoint, Request, Roles, frozen_map
from systemone.jsontext import (
    DECLINED,
    DuplicateMember,
    Json,
    JsonObject,
    JsonTextError,
    as_content,
    read_plain,
    read_shape,
    stdlib_loads,
)
from systemone.media import inline_media, media_split, read_assets, read_media_member
from systemone.questions import read_questions
from systemone.rules import READINGS, Reading

__all__ = ["READINGS", "Reading", "parse_json", "read_body", "read_doc"]
_ROLES_TYPE = F.EXTENSION_FIELDS["request.roles"]["type"]
_UNREAD: Any = object()


# ---------------------------------------------------------------------------- entry point


def read_body(body: bytes, reading: Reading, endpoint: Endpoint) -> tuple[Request | Batch, tuple[str, ...]]:
    """The IR of ``body`` and the 4.0-only forms it used; raises a ProtocolError."""
    if len(body) > MAX_BODY_BYTES:
        raise RequestTooLarge(len(body))
    tree = read_plain(body)
    if tree is not DECLINED:
        fast = fastread.read(tree, reading, endpoint, source=body)
        if fast is not None:
            return fast
    doc = parse_json(body, tree)
    if tree is DECLINED:  # read by the standard library (``\u00e9`` escapes, say): common all the same?
        fast = fastread.read(read_shape(body), reading, endpoint, content=doc)
        if fast is not None:
            return fast
    return read_doc(doc, reading, endpoint)


def read_doc(doc: JsonObject, reading: Reading, endpoint: Endpoint) -> tuple[Request | Batch, tuple[str, ...]]:
    """The general reader, for a parsed body: every form, every problem (``read_body`` has
    ``fastread`` read the common form first)."""
    found = Found()
    if endpoint == "batch" or (endpoint == "decisions" and "requests" in doc):
        ir: Request | Batch = _batch(doc, reading, found)
    else:
        ir = _request(doc, reading, found, ("body",), batch=False)
    _raise(found, reading)
    if reading.tolerant:
        _require_one_valid(ir)
    return ir, tuple(found.forms)


def parse_json(body: bytes, tree: Any = _UNREAD) -> JsonObject:
    """The body as a JSON object (``tree``: what ``read_plain`` made of it, when at hand)."""
    if tree is _UNREAD:
        tree = read_plain(body)
    try:
        doc: Json = stdlib_loads(body) if tree is DECLINED else as_content(tree)
    except DuplicateMember as exc:
        raise ValidationFailed([DetailItem(("body",), str(exc), "json_invalid")]) from None
    except JsonTextError as exc:
        raise ValidationFailed(
            [DetailItem(("body", max(exc.position, 0)), f"JSON decode error: {exc}", "json_invalid")]
        ) from None
    if not isinstance(doc, dict):
        raise ValidationFailed([DetailItem(("body",), "the body must be a JSON object", "model_attributes_type")])
    return doc


def _raise(found: Found, reading: Reading) -> None:
    if found.unknown:
        raise UnknownMembers(found.unknown, reading.schema if reading.schema != "internal" else "the internal form")
    if found.items:
        questions = {i.loc[2] for i in found.items if len(i.loc) > 2 and i.loc[1] == "questions"}
        limits = [i.ctx.get("max_length", i.ctx.get("min_length")) for i in found.items if i.ctx]
        raise ValidationFailed(
            found.items,
            question=str(next(iter(questions))) if len(questions) == 1 else None,
            limit=limits[0] if len(limits) == 1 and len(found.items) == 1 else None,
        )


def _require_one_valid(ir: Request | Batch) -> None:
    requests = ir.items.values() if isinstance(ir, Batch) else (ir,)
    failed = [(q_id, q.problem) for r in requests for q_id, q in r.questions.items() if q.problem is not None]
    total = sum(len(r.questions) for r in requests)
    if failed and len(failed) == total:
        lines = "; ".join(f"{q_id}: {p.message}" for q_id, p in failed)
        raise InvalidRequest(f"no question can be answered: {lines}", reason="no_valid_question")


# ---------------------------------------------------------------------------- requests


def _batch(doc: JsonObject, reading: Reading, found: Found) -> Batch:
    check_members(doc, frozenset({"model", "requests", "options"}), ("body",), reading, found)
    loc: Loc = ("body",)
    model = _model(doc, reading, found, loc, required=False)
    options = _options(doc, reading, found, loc)
    requests = doc.get("requests", MISSING)
    items: dict[str, Request] = {}
    if requests is MISSING:
        found.bad(loc + ("requests",), "Field required", "missing")
    elif found.typed(loc + ("requests",), "map<any>", requests, {"min_items": 1}):
        for name, raw in requests.items():
            at = loc + ("requests", name)
            if not name:
                found.bad(at, "a request name must not be empty", "string_too_short")
            if not isinstance(raw, dict):
                found.bad(at, "must be an object", "model_attributes_type")
                continue
            item = _request(raw, reading, found, at, batch=True)
            if model is not None and item.model is not None and item.model != model:
                found.bad(at + ("model",), f"names model {item.model!r}, but the batch is for {model!r}", "value_error")
            items[name] = item
    long_context = bool(options is not None and options.get("long_context") is True)
    return Batch(frozen_map(items), "requests", model, options, long_context, tuple(doc))


def _request(doc: Mapping[str, Any], reading: Reading, found: Found, loc: Loc, batch: bool) -> Request:
    allowed = reading.request_members - ({"options", "states"} if batch else set())
    if not reading.internal or batch:
        allowed = allowed - {"requests"}
    check_members(doc, allowed, loc, reading, found)
    model = _model(doc, reading, found, loc, required="model" in reading.required and not batch)
    options = None if batch else _options(doc, reading, found, loc)
    state, states = _state(doc, reading, found, loc)
    assets, assets_member = read_assets(doc, reading, found, loc)
    questions = read_questions(doc, reading, found, loc)
    media: tuple[str, ...] = ()
    media_member = ""
    if assets_member == "inline":
        media, media_member = inline_media(state, states, questions, assets), "inline"
    elif "media" in doc:
        media, media_member = read_media_member(doc["media"], assets, found, loc), "media"
    elif state is not MISSING and media_split(state, assets) is not None:
        if reading.media_rule:
            media, state = media_split(state, assets)  # type: ignore[misc]  # media_split was just found to split it
            media_member = "state"
        elif reading.legacy:
            found.form("media_array")
    # Roles name keys of the state as read: after the media rule took the media off it.
    roles = _roles(doc, reading, found, loc, state if states is None else states)
    long_context = bool(options is not None and options.get("long_context") is True)
    if long_context:
        found.form("long_context")
    request = Request(
        state=state,
        questions=questions,
        roles=roles,
        model=model,
        assets=assets,
        assets_member=assets_member,
        media=media,
        media_member=media_member,
        options=options,
        long_context=long_context,
        order=tuple(doc),
    )
    if states is not None:
        return _states_batch(request, states)  # type: ignore[return-value]
    return request


def _states_batch(template: Request, states: tuple[Any, ...]) -> Batch:
    """A 4.0 ``states`` request: one question set over several states, items named by index."""
    items = {str(i): template.with_(state=s, options=None) for i, s in enumerate(states)}
    return Batch(frozen_map(items), "states", template.model, template.options, template.long_context, template.order)


def _model(doc: Mapping[str, Any], reading: Reading, found: Found, loc: Loc, required: bool) -> str | None:
    if "model" not in doc:
        if required:
            found.bad(loc + ("model",), "Field required", "missing")
        return None
    model = doc["model"]
    return model if found.typed(loc + ("model",), "string", model) else None


def _options(doc: Mapping[str, Any], reading: Reading, found: Found, loc: Loc) -> JsonObject | None:
    if "options" not in doc or "options" not in reading.request_members:
        return None
    options = doc["options"]
    at = loc + ("options",)
    if not found.typed(at, "map<any>", options):
        return None
    check_members(options, frozenset(reading.options), at, reading, found)
    for name, value in options.items():
        if name in reading.options and not reading.option_valid[name](value):
            type_, bounds = reading.options[name]
            found.typed(at + (name,), type_, value, bounds)
    return options


def _state(doc: Mapping[str, Any], reading: Reading, found: Found, loc: Loc) -> tuple[Any, tuple[Any, ...] | None]:
    has_state, has_states = "state" in doc, "states" in doc and "states" in reading.request_members
    if has_state and has_states:
        found.bad(loc + ("states",), "give state or states, not both", "value_error")
        return MISSING, None
    if has_states:
        found.form("states")
        states = doc["states"]
        type_, bounds = F.LEGACY_REQUEST["states"]
        return MISSING, (states if found.typed(loc + ("states",), type_, states, bounds) else ())
    if not has_state:
        found.bad(loc + ("state",), "Field required", "missing")
        return MISSING, None
    state = doc["state"]
    found.typed(loc + ("state",), "text", state)
    return state, None


def _roles(doc: Mapping[str, Any], reading: Reading, found: Found, loc: Loc, state: Any) -> Roles:
    if "roles" not in reading.request_members:
        return NO_ROLES
    if "roles" not in doc:
        if not reading.legacy:
            return NO_ROLES
        states = state if isinstance(state, tuple) and "states" in doc else (state,)
        if any(isinstance(s, dict) for s in states):
            found.form("implicit_roles")
        return IMPLICIT
    roles = doc["roles"]
    at = loc + ("roles",)
    if roles is None:
        return NO_ROLES
    if not found.typed(at, _ROLES_TYPE, roles):
        return NO_ROLES
    for s in state if isinstance(state, tuple) and "states" in doc else (state,):
        if isinstance(s, dict):
            for key in roles:
                if key not in s:
                    found.bad(at + (key,), f"{key!r} is not a key of the state", "value_error")
        elif isinstance(s, (tuple, list)):
            found.bad(at, "roles name keys of an object state; this state is an array", "value_error")
    return Roles("explicit", roles)
