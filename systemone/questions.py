"""Reading questions: types, criteria (and 4.0's choices, levels and labels), extension fields,
and 4.0's preset-only questions. On /v1/decisions a question that fails is kept with its problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from systemone.errors import DetailItem, ErrorInfo, loc_text
from systemone.found import Found, Loc, check_members
from systemone.generated import fields as F
from systemone.ir import MISSING, Question, read_question
from systemone.jsontext import Json, JsonObject
from systemone.rules import CRITERIA_SPELLINGS, Reading

_QUESTION_EXTENSIONS = {k.split(".", 1)[1]: v for k, v in F.EXTENSION_FIELDS.items() if k.startswith("question.")}
_NO_EXTENSIONS = JsonObject()
_TEXT = (str, dict, tuple, list)  # what a "text" field holds: a string, an object or an array
# Question types that cannot be asked without criteria (options, levels or labels).
NEEDS_CRITERIA = frozenset(
    [t for t, m in F.STANDARD_QUESTIONS.items() if "criteria" in m and m["criteria"][1]]
    + [t for t, e in F.EXTENSION_QUESTION_TYPES.items() if e["criteria"]]
)


def read_questions(doc: Mapping[str, Any], reading: Reading, found: Found, loc: Loc) -> Mapping[str, Question]:
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
        own = Found() if reading.tolerant else found
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
    problem = ErrorInfo(
        422, "invalid_question", message, "api_usage_error", "question_malformed", q_id, items=tuple(items)
    )
    return Question(type=str(raw.get("type", "")), order=tuple(raw), problem=problem, raw=raw)


def _question(q: Json, reading: Reading, found: Found, at: Loc) -> Question | None:
    # The common question passes cheap checks; any check that fails hands the value to
    # ``found.typed``, which decides and explains exactly as for every other field.
    if not isinstance(q, dict):
        found.bad(at, "must be an object", "model_attributes_type")
        return None
    kind = q.get("type", MISSING)
    if kind is MISSING:
        found.bad(at, "Unable to extract tag using discriminator 'type'", "union_tag_not_found")
        return None
    if not isinstance(kind, str) or kind not in reading.question_members:  # (an object is not hashable)
        tags = ", ".join(repr(t) for t in reading.question_members)
        found.bad(
            at + ("type",),
            f"Input tag {kind!r} found using 'type' does not match any of the expected tags: {tags}",
            "union_tag_invalid",
        )
        return None
    at = at + (kind,)  # FastAPI's loc names the union member: questions.<id>.<type>.<field>
    allowed = reading.question_members[kind]
    known = allowed.issuperset(q)  # then every member is one the internal form writes back
    if not known:
        for name in q.keys() - allowed:
            if reading.ignore_unknown and name not in reading.refused:
                continue
            why = f" ({kind} questions take no {name})" if _defined_elsewhere(name, reading) else ""
            found.unknown.append(loc_text(at[:-1] + (name,)) + why)
    instructions = q.get("instructions", MISSING)
    if instructions is not MISSING and instructions is not None and not isinstance(instructions, _TEXT):
        found.typed(at + ("instructions",), "text?", instructions)
    criteria, member = _criteria(q, kind, reading, found, at)
    extensions = _NO_EXTENSIONS
    if not q.keys().isdisjoint(_QUESTION_EXTENSIONS):
        extensions = JsonObject((name, q[name]) for name in q if name in allowed and name in _QUESTION_EXTENSIONS)
        for name, value in extensions.items():
            spec = _QUESTION_EXTENSIONS[name]
            found.typed(at + (name,), spec["type"], value, spec["bounds"])
    question = read_question(kind, instructions, criteria, member, extensions, tuple(q), q if known else None)
    if question.preset_only:
        _preset_only(question, reading, found, at)
    elif kind in NEEDS_CRITERIA and q.keys().isdisjoint(CRITERIA_SPELLINGS):
        found.bad(at + ("criteria",), "Field required", "missing")
    return question


def _defined_elsewhere(name: str, reading: Reading) -> bool:
    return any(name in members for members in reading.question_members.values())


def _criteria(q: Mapping[str, Any], kind: str, reading: Reading, found: Found, at: Loc) -> tuple[Any, str]:
    given = [m for m in reading.spellings[kind] if m in q]
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
            check_members(value, frozenset(F.STANDARD_NOUL_CRITERIA), at[:-1] + ("criteria",), reading, found)
            for side in ("true", "false"):
                if side in value:
                    found.typed(at + ("criteria", side), "text?", value[side])
        return value, member
    if kind == "score" and isinstance(value, dict):
        found.bad(
            at + ("criteria",),
            "score criteria are an array of levels, low to high (the map form is not accepted)",
            "list_type",
        )
        return MISSING, member
    check = reading.criteria_valid.get(kind)
    if check is not None and not check(value):
        type_, bounds = reading.criteria[kind]  # type: ignore[misc]
        found.typed(at + ("criteria",), type_, value, bounds)
    return value, member


def _preset_only(question: Question, reading: Reading, found: Found, at: Loc) -> None:
    if not reading.legacy:
        found.bad(
            at + ("preset",),
            (
                "a question with a preset carries its own instructions and criteria in vllm-sr/5.0 (a preset "
                "alone is a vllm-sr/4.0 form)"
            ),
            "missing",
        )
        return
    found.form("preset_only")
    preset = F.PRESETS.get(question.preset) if isinstance(question.preset, str) else None
    if preset is None:
        found.bad(
            at + ("preset",), f"unknown preset {question.preset!r} (canonical presets: {', '.join(F.PRESETS)})", "enum"
        )
    elif preset["type"] != question.type:
        found.bad(
            at + ("preset",),
            f"preset {question.preset!r} is a {preset['type']} question, not {question.type}",
            "value_error",
        )
