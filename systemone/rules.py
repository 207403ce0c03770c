"""What each schema accepts when it reads a request: one ``Reading`` table per schema.

Built once from the generated field tables. The legacy reading (vllm-sr/4.0, and the internal
form) takes every 4.0-only form; the bare systemone/0.2 reading ignores unknown members as the
standard says, except vllm-sr extension fields, which it refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from systemone import fieldtypes
from systemone.generated import fields as F

# How a question may spell its criteria; the first one present is read (4.0 spellings second).
CRITERIA_SPELLINGS = ("criteria", "choices", "levels", "labels")


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
    # Derived once, for the per-request path: question type -> the criteria spellings it takes,
    # -> a yes/no for its standard ``criteria``, and each option -> a yes/no for its value (a no is
    # explained by ``fieldtypes.problems``).
    spellings: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    criteria_valid: Mapping[str, Callable[[Any], bool]] = field(init=False, repr=False, compare=False)
    option_valid: Mapping[str, Callable[[Any], bool]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spellings = {
            t: tuple(s for s in CRITERIA_SPELLINGS if s in members) for t, members in self.question_members.items()
        }
        checks = {t: fieldtypes.validator(*spec) for t, spec in self.criteria.items() if spec is not None}
        object.__setattr__(self, "spellings", MappingProxyType(spellings))
        object.__setattr__(self, "criteria_valid", MappingProxyType(checks))
        object.__setattr__(
            self,
            "option_valid",
            MappingProxyType({name: fieldtypes.validator(*spec) for name, spec in self.options.items()}),
        )


def _ext(level: str) -> dict[str, dict[str, Any]]:
    prefix = level + "."
    return {k[len(prefix) :]: v for k, v in F.EXTENSION_FIELDS.items() if k.startswith(prefix)}


def _build() -> dict[str, Reading]:
    std_criteria = {
        t: (m["criteria"][0], m["criteria"][2]) if "criteria" in m else None for t, m in F.STANDARD_QUESTIONS.items()
    }
    ext_criteria = {t: e["criteria"] for t, e in F.EXTENSION_QUESTION_TYPES.items()}
    std_members = {t: frozenset({"type", *m}) for t, m in F.STANDARD_QUESTIONS.items()}
    ext_members = {
        t: frozenset({"type", "instructions", *(["criteria"] if c else [])}) for t, c in ext_criteria.items()
    }
    qfields = _ext("question")

    def with_fields(
        members: Mapping[str, frozenset[str]], extra: Mapping[str, tuple[str, ...]]
    ) -> dict[str, frozenset[str]]:
        return {t: m | {name for name, types in extra.items() if not types or t in types} for t, m in members.items()}

    q_ext = {name: spec["question_types"] for name, spec in qfields.items()}
    q_legacy = {name: spec[2] for name, spec in F.LEGACY_QUESTION.items()}
    v50_members = with_fields({**std_members, **ext_members}, q_ext)
    options = {name: (spec["type"], spec["bounds"]) for name, spec in _ext("options").items()}
    extension_names = frozenset(
        [
            *(k.split(".", 1)[1] for k in F.EXTENSION_FIELDS if k.startswith(("request.", "question."))),
            "states",
            "images",
            "videos",
        ]
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
