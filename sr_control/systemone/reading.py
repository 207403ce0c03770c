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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sr_control.systemone import fieldtypes
from sr_control.systemone.errors import (
    MAX_BODY_BYTES,
    DetailItem,
    ErrorInfo,
    InvalidRequest,
    RequestTooLarge,
    UnknownMembers,
    ValidationFailed,
    loc_text,
)
from sr_control.systemone.generated import fields as F
from sr_control.systemone.ir import (
    IMPLICIT,
    MISSING,
    NO_ROLES,
    Asset,
    Batch,
    Endpoint,
    Question,
    Request,
    Roles,
    frozen_map,
)
from sr_control.systemone.jsontext import DuplicateMember, JsonObject, JsonTextError, loads

Loc = tuple[str | int, ...]
_ROLES_TYPE = F.EXTENSION_FIELDS["request.roles"]["type"]
_IMG, _VID = "⟦img-{}⟧", "⟦vid-{}⟧"
_QUESTION_EXTENSIONS = {k.split(".", 1)[1]: v for k, v in F.EXTENSION_FIELDS.items() if k.startswith("question.")}
_NO_EXTENSIONS = JsonObject()
# Question types that cannot be asked without criteria (options, levels or labels).
_NEEDS_CRITERIA = frozenset(
    [t for t, m in F.STANDARD_QUESTIONS.items() if "criteria" in m and m["criteria"][1]]
    + [t for t, e in F.EXTENSION_QUESTION_TYPES.items() if e["criteria"]]
)


@dataclass(frozen=True, slots=True)
class Reading:
    """What one schema accepts; built once from the generated tables."""

    schema: str
    request_members: frozenset[str]
    required: frozenset[str]
    options: Mapping[str, tuple[str, dict[str, Any]]]
    criteria: Mapping[str, tuple[str, dict[str, Any]] | None]  # question type -> its criteria
    question_members: Mapping[str, frozenset[str]]  # question type -> members it takes
    asset_formats: Mapping[str, tuple[str, ...]]
    legacy: bool = False  # 4.0 forms and readings
    internal: bool = False  # the internal wire form: media, requests, roles null
    media_rule: bool = False  # 5.0: placeholders then one element read as that element
    ignore_unknown: bool = False  # 0.2: the standard ignores unknown members...
    refused: frozenset[str] = frozenset()  # ...but vllm-sr extension fields are refused
    tolerant: bool = False  # /v1/decisions: a failed question is kept, not raised


def _ext(level: str) -> dict[str, dict[str, Any]]:
    prefix = level + "."
    return {k[len(prefix) :]: v for k, v in F.EXTENSION_FIELDS.items() if k.startswith(prefix)}


def _build() -> dict[str, Reading]:
    std_criteria = {t: (m["criteria"][0], m["criteria"][2]) if "criteria" in m else None for t, m in F.STANDARD_QUESTIONS.items()}
    ext_criteria = {t: e["criteria"] for t, e in F.EXTENSION_QUESTION_TYPES.items()}
    std_members = {t: frozenset({"type", *m}) for t, m in F.STANDARD_QUESTIONS.items()}
    ext_members = {t: frozenset({"type", "instructions", *(["criteria"] if c else [])}) for t, c in ext_criteria.items()}
    qfields = _ext("question")

    def with_fields(members: Mapping[str, frozenset[str]], extra: Mapping[str, tuple[str, ...]]) -> dict[str, frozenset[str]]:
        return {t: m | {name for name, types in extra.items() if not types or t in types} for t, m in members.items()}

    q_ext = {name: spec["question_types"] for name, spec in qfields.items()}
    q_legacy = {name: spec[2] for name, spec in F.LEGACY_QUESTION.items()}
    v50_members = with_fields({**std_members, **ext_members}, q_ext)
    options = {name: (spec["type"], spec["bounds"]) for name, spec in _ext("options").items()}
    extension_names = frozenset(
        [*(k.split(".", 1)[1] for k in F.EXTENSION_FIELDS if k.startswith(("request.", "question."))), "states", "images", "videos"]
    )
    standard = Reading(
        schema="systemone/0.2",
        request_members=frozenset(F.STANDARD_REQUEST),
        required=frozenset(k for k, v in F.STANDARD_REQUEST.items() if v[1]),
        options={},
        criteria=std_criteria,
        question_members=std_members,
        asset_formats=F.STANDARD_ASSET_FORMATS,
        ignore_unknown=True,
        refused=extension_names,
    )
    v50 = Reading(
        schema="vllm-sr/5.0",
        request_members=frozenset({*F.STANDARD_REQUEST, "roles", "options"}),
        required=frozenset({"state", "questions"}),
        options=options,
        criteria={**std_criteria, **ext_criteria},
        question_members=v50_members,
        asset_formats={**F.STANDARD_ASSET_FORMATS, **F.EXTENSION_ASSET_TYPES},
        media_rule=True,
    )
    legacy_options = {**options, **F.LEGACY_OPTIONS}
    v40 = Reading(
        schema="vllm-sr/4.0",
        request_members=v50.request_members | frozenset(F.LEGACY_REQUEST),
        required=frozenset({"questions"}),
        options=legacy_options,
        criteria=v50.criteria,
        question_members=with_fields(v50_members, q_legacy),
        asset_formats=v50.asset_formats,
        legacy=True,
    )
    internal = Reading(
        schema="internal",
        request_members=v40.request_members | {"media"},
        required=v40.required,
        options=legacy_options,
        criteria=v40.criteria,
        question_members=v40.question_members,
        asset_formats=v40.asset_formats,
        legacy=True,
        internal=True,
        tolerant=True,
    )
    return {r.schema: r for r in (standard, v50, v40, internal)}


READINGS: Mapping[str, Reading] = MappingProxyType(_build())


@dataclass
class _Found:
    """Everything wrong with one body, gathered before anything is raised."""

    unknown: list[str] = field(default_factory=list)
    items: list[DetailItem] = field(default_factory=list)
    forms: list[str] = field(default_factory=list)

    def bad(self, loc: Loc, msg: str, kind: str, ctx: dict[str, Any] | None = None) -> None:
        self.items.append(DetailItem(loc, msg, kind, ctx))

    def form(self, name: str) -> None:
        if name not in self.forms:
            self.forms.append(name)

    def typed(self, loc: Loc, type_: str, value: Any, bounds: Mapping[str, Any] | None = None) -> bool:
        if fieldtypes.valid(type_, value, bounds):
            return True
        found = fieldtypes.problems(type_, value, bounds)
        for at, msg, kind in found:
            ctx = _limit_ctx(kind, bounds)
            self.bad(loc + at, msg, kind, ctx)
        return not found


def _limit_ctx(kind: str, bounds: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if bounds and kind == "too_short":
        return {"min_length": bounds["min_items"]}
    if bounds and kind == "too_long":
        return {"max_length": bounds["max_items"]}
    return None


# ---------------------------------------------------------------------------- entry point


def read_body(body: bytes, reading: Reading, endpoint: Endpoint) -> tuple[Request | Batch, tuple[str, ...]]:
    """The IR of ``body`` and the 4.0-only forms it used; raises a ProtocolError."""
    if len(body) > MAX_BODY_BYTES:
        raise RequestTooLarge(len(body))
    doc = parse_json(body)
    found = _Found()
    if endpoint == "batch" or (endpoint == "decisions" and "requests" in doc):
        ir: Request | Batch = _batch(doc, reading, found)
    else:
        ir = _request(doc, reading, found, ("body",), batch=False)
    _raise(found, reading)
    if reading.tolerant:
        _require_one_valid(ir)
    return ir, tuple(found.forms)


def parse_json(body: bytes) -> JsonObject:
    try:
        doc = loads(body)
    except DuplicateMember as exc:
        raise ValidationFailed([DetailItem(("body",), str(exc), "json_invalid")]) from None
    except JsonTextError as exc:
        raise ValidationFailed(
            [DetailItem(("body", max(exc.position, 0)), f"JSON decode error: {exc}", "json_invalid")]
        ) from None
    if not isinstance(doc, dict):
        raise ValidationFailed([DetailItem(("body",), "the body must be a JSON object", "model_attributes_type")])
    return doc


def _raise(found: _Found, reading: Reading) -> None:
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


def _unknown(doc: Mapping[str, Any], allowed: frozenset[str], loc: Loc, reading: Reading, found: _Found, why: str = "") -> None:
    for name in doc:
        if name in allowed:
            continue
        if reading.ignore_unknown and name not in reading.refused:
            continue
        found.unknown.append(loc_text(loc + (name,)) + why)


# ---------------------------------------------------------------------------- requests


def _batch(doc: JsonObject, reading: Reading, found: _Found) -> Batch:
    _unknown(doc, frozenset({"model", "requests", "options"}), ("body",), reading, found)
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


def _request(doc: JsonObject, reading: Reading, found: _Found, loc: Loc, batch: bool) -> Request:
    allowed = reading.request_members - ({"options", "states"} if batch else set())
    if not reading.internal or batch:
        allowed = allowed - {"requests"}
    _unknown(doc, allowed, loc, reading, found)
    model = _model(doc, reading, found, loc, required="model" in reading.required and not batch)
    options = None if batch else _options(doc, reading, found, loc)
    state, states = _state(doc, reading, found, loc)
    assets, assets_member = _assets(doc, reading, found, loc)
    questions = _questions(doc, reading, found, loc)
    media: tuple[str, ...] = ()
    media_member = ""
    if assets_member == "inline":
        media, media_member = _inline_media(state, states, questions, assets), "inline"
    elif "media" in doc:
        media, media_member = _media_member(doc["media"], assets, found, loc), "media"
    elif state is not MISSING and _media_split(state, assets) is not None:
        if reading.media_rule:
            media, state = _media_split(state, assets)  # type: ignore[misc]
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


def _model(doc: Mapping[str, Any], reading: Reading, found: _Found, loc: Loc, required: bool) -> str | None:
    if "model" not in doc:
        if required:
            found.bad(loc + ("model",), "Field required", "missing")
        return None
    model = doc["model"]
    return model if found.typed(loc + ("model",), "string", model) else None


def _options(doc: Mapping[str, Any], reading: Reading, found: _Found, loc: Loc) -> JsonObject | None:
    if "options" not in doc or "options" not in reading.request_members:
        return None
    options = doc["options"]
    at = loc + ("options",)
    if not found.typed(at, "map<any>", options):
        return None
    _unknown(options, frozenset(reading.options), at, reading, found)
    for name, value in options.items():
        if name in reading.options:
            type_, bounds = reading.options[name]
            found.typed(at + (name,), type_, value, bounds)
    return options


def _state(doc: Mapping[str, Any], reading: Reading, found: _Found, loc: Loc) -> tuple[Any, tuple[Any, ...] | None]:
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


def _roles(doc: Mapping[str, Any], reading: Reading, found: _Found, loc: Loc, state: Any) -> Roles:
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
    for s in (state if isinstance(state, tuple) and "states" in doc else (state,)):
        if isinstance(s, dict):
            for key in roles:
                if key not in s:
                    found.bad(at + (key,), f"{key!r} is not a key of the state", "value_error")
        elif isinstance(s, (tuple, list)):
            found.bad(at, "roles name keys of an object state; this state is an array", "value_error")
    return Roles("explicit", roles)


# ---------------------------------------------------------------------------- media


def _assets(doc: Mapping[str, Any], reading: Reading, found: _Found, loc: Loc) -> tuple[Mapping[str, Asset], str]:
    inline = [k for k in ("images", "videos") if k in doc and k in reading.request_members]
    if inline and "assets" in doc:
        found.bad(loc + (inline[0],), "give assets or inline images and videos, not both", "value_error")
        return MappingProxyType({}), "assets"
    if inline:
        return _inline_assets(doc, inline, found, loc), "inline"
    raw = doc.get("assets")
    if raw is None:
        return MappingProxyType({}), "assets"
    at = loc + ("assets",)
    if not found.typed(at, "map<any>", raw, {"min_items": 1}):
        return MappingProxyType({}), "assets"
    assets: dict[str, Asset] = {}
    members = frozenset(F.STANDARD_ASSET)
    for placeholder, asset in raw.items():
        here = at + (placeholder,)
        if not placeholder:
            found.bad(here, "a placeholder must not be empty", "string_too_short")
        if not found.typed(here, "map<any>", asset):
            continue
        _unknown(asset, members, here, reading, found)
        kind = asset.get("type", "image")
        if kind not in reading.asset_formats:
            found.bad(here + ("type",), f"must be one of {', '.join(reading.asset_formats)}", "enum")
            continue
        _asset_body(asset, reading.asset_formats[kind], found, here)
        assets[placeholder] = Asset(kind, asset)
    return MappingProxyType(assets), "assets"


def _asset_body(asset: Mapping[str, Any], formats: tuple[str, ...], found: _Found, at: Loc) -> None:
    for name in ("data_base64", "part"):
        if name in asset:
            found.typed(at + (name,), "string?", asset[name])
    if asset.get("part") is None and asset.get("data_base64") is None:
        found.bad(at, "needs data_base64 or part", "missing")
    if asset.get("data_base64") is not None and asset.get("part") is None and "format" not in asset:
        found.bad(at + ("format",), "Field required with data_base64", "missing")
    if asset.get("format") is not None and asset["format"] not in formats:
        found.bad(at + ("format",), f"must be one of {', '.join(formats)}", "enum")


def _inline_assets(doc: Mapping[str, Any], members: list[str], found: _Found, loc: Loc) -> Mapping[str, Asset]:
    assets: dict[str, Asset] = {}
    for member in members:
        found.form(member)
        kind, formats = F.LEGACY_INLINE_MEDIA[member]
        pattern = _IMG if member == "images" else _VID
        at = loc + (member,)
        if not found.typed(at, "array<map<any>>", doc[member]):
            continue
        for i, item in enumerate(doc[member]):
            here = at + (i,)
            for name in item:
                if name not in ("format", "data_base64"):
                    found.unknown.append(loc_text(here + (name,)))
            found.typed(here + ("data_base64",), "string", item.get("data_base64"))
            if item.get("format") not in formats:
                found.bad(here + ("format",), f"must be one of {', '.join(formats)}", "enum")
            assets[pattern.format(i + 1)] = Asset(kind, item)
    return MappingProxyType(assets)


def _media_split(state: Any, assets: Mapping[str, Asset]) -> tuple[tuple[str, ...], Any] | None:
    """Image placeholders, then video placeholders, then exactly one other element."""
    if not isinstance(state, tuple) or len(state) < 2 or not assets:
        return None
    i, n = 0, len(state) - 1
    for kind in ("image", "video"):
        while i < n and isinstance(state[i], str) and state[i] in assets and assets[state[i]].type == kind:
            i += 1
    if i != n:
        return None
    return tuple(state[:n]), state[n]


def _media_member(raw: Any, assets: Mapping[str, Asset], found: _Found, loc: Loc) -> tuple[str, ...]:
    at = loc + ("media",)
    if not found.typed(at, "array<string>", raw, {"min_items": 1}):
        return ()
    for i, placeholder in enumerate(raw):
        if placeholder not in assets:
            found.bad(at + (i,), f"{placeholder!r} is not an asset placeholder", "value_error")
    return tuple(raw)


def _inline_media(state: Any, states: Any, questions: Mapping[str, Question], assets: Mapping[str, Asset]) -> tuple[str, ...]:
    """4.0 inline media that nothing refers to are read before the state, images then videos."""
    texts = list(_strings(states if states is not None else state))
    for q in questions.values():
        texts += _strings(q.instructions)
        texts += _strings(q.criteria)
    return tuple(p for p in assets if not any(p in t for t in texts))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield name
            yield from _strings(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _strings(item)


# ---------------------------------------------------------------------------- questions


def _questions(doc: Mapping[str, Any], reading: Reading, found: _Found, loc: Loc) -> Mapping[str, Question]:
    at = loc + ("questions",)
    if "questions" not in doc:
        found.bad(at, "Field required", "missing")
        return MappingProxyType({})
    raw = doc["questions"]
    if not found.typed(at, "map<any>", raw, {"min_items": 1}):
        return MappingProxyType({})
    out: dict[str, Question] = {}
    for q_id, q in raw.items():
        here = at + (q_id,)
        if not q_id:
            found.bad(here, "a question id must not be empty", "string_too_short")
            continue
        own = _Found() if reading.tolerant else found
        question = _question(q, reading, own, here)
        if own is not found:
            found.unknown += own.unknown
            for name in own.forms:
                found.form(name)
            if own.items and question is not None:
                question = _failed(q_id, q, own.items)
            elif own.items:
                found.items += own.items
        if question is not None:
            out[q_id] = question
    return MappingProxyType(out)


def _failed(q_id: str, raw: Any, items: list[DetailItem]) -> Question:
    message = "; ".join(f"{loc_text(i.loc)}: {i.msg}" for i in items)
    problem = ErrorInfo(422, "invalid_question", message, "api_usage_error", "question_malformed", q_id, items=tuple(items))
    return Question(type=str(raw.get("type", "")), order=tuple(raw), problem=problem, raw=raw)


def _question(q: Any, reading: Reading, found: _Found, at: Loc) -> Question | None:
    if not isinstance(q, dict):
        found.bad(at, "must be an object", "model_attributes_type")
        return None
    kind = q.get("type", MISSING)
    if kind is MISSING:
        found.bad(at, "Unable to extract tag using discriminator 'type'", "union_tag_not_found")
        return None
    if kind not in reading.question_members:
        tags = ", ".join(repr(t) for t in reading.question_members)
        found.bad(at + ("type",), f"Input tag {kind!r} found using 'type' does not match any of the expected tags: {tags}", "union_tag_invalid")
        return None
    at = at + (kind,)  # FastAPI's loc names the union member: questions.<id>.<type>.<field>
    allowed = reading.question_members[kind]
    for name in q.keys() - allowed:
        if reading.ignore_unknown and name not in reading.refused:
            continue
        why = f" ({kind} questions take no {name})" if _defined_elsewhere(name, reading) else ""
        found.unknown.append(loc_text(at[:-1] + (name,)) + why)
    if "instructions" in q:
        found.typed(at + ("instructions",), "text?", q["instructions"])
    criteria, member = _criteria(q, kind, reading, found, at)
    extensions = _NO_EXTENSIONS
    if not q.keys().isdisjoint(_QUESTION_EXTENSIONS):
        extensions = JsonObject((name, q[name]) for name in q if name in allowed and name in _QUESTION_EXTENSIONS)
        for name, value in extensions.items():
            spec = _QUESTION_EXTENSIONS[name]
            found.typed(at + (name,), spec["type"], value, spec["bounds"])
    question = Question(
        type=kind,
        instructions=q.get("instructions", MISSING),
        criteria=criteria,
        criteria_member=member,
        extensions=extensions,
        order=tuple(q),
    )
    if question.preset_only:
        _preset_only(question, reading, found, at)
    elif kind in _NEEDS_CRITERIA and not any(m in q for m in ("criteria", "choices", "levels", "labels")):
        found.bad(at + ("criteria",), "Field required", "missing")
    return question


def _defined_elsewhere(name: str, reading: Reading) -> bool:
    return any(name in members for members in reading.question_members.values())


def _criteria(q: Mapping[str, Any], kind: str, reading: Reading, found: _Found, at: Loc) -> tuple[Any, str]:
    given = [m for m in ("criteria", "choices", "levels", "labels") if m in q and m in reading.question_members[kind]]
    if len(given) > 1:
        found.bad(at + (given[1],), f"give {given[0]} or {given[1]}, not both", "value_error")
        return MISSING, given[0]
    if not given:
        return MISSING, "criteria"
    member = given[0]
    value = q[member]
    if member != "criteria":
        found.form(member)
        type_, bounds, _ = F.LEGACY_QUESTION[member]
        if not found.typed(at + (member,), type_, value, bounds):
            return MISSING, member
        if member == "levels":
            return value, member
        if len(set(value)) != len(value):
            found.bad(at + (member,), f"{member} must not repeat a name", "value_error")
            return MISSING, member
        return JsonObject((name, None) for name in value), member
    if kind == "noul":
        if value is not None and found.typed(at + ("criteria",), "map<any>", value):
            _unknown(value, frozenset(F.STANDARD_NOUL_CRITERIA), at[:-1] + ("criteria",), reading, found)
            for side in ("true", "false"):
                if side in value:
                    found.typed(at + ("criteria", side), "text?", value[side])
        return value, member
    if kind == "score" and isinstance(value, dict):
        found.bad(at + ("criteria",), "score criteria are an array of levels, low to high (the map form is not accepted)", "list_type")
        return MISSING, member
    spec = reading.criteria.get(kind)
    if spec is not None:
        found.typed(at + ("criteria",), spec[0], value, spec[1])
    return value, member


def _preset_only(question: Question, reading: Reading, found: _Found, at: Loc) -> None:
    if not reading.legacy:
        found.bad(
            at + ("preset",),
            "a question with a preset carries its own instructions and criteria in vllm-sr/5.0 (a preset alone is a vllm-sr/4.0 form)",
            "missing",
        )
        return
    found.form("preset_only")
    preset = F.PRESETS.get(question.preset or "")
    if preset is None:
        found.bad(at + ("preset",), f"unknown preset {question.preset!r} (canonical presets: {', '.join(F.PRESETS)})", "enum")
    elif preset["type"] != question.type:
        found.bad(at + ("preset",), f"preset {question.preset!r} is a {preset['type']} question, not {question.type}", "value_error")
