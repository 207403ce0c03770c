"""The three spec documents, parsed, and the rules that hold between them.

    parse_specs({file name: text}) -> SpecSet        pure: the caller reads the files
    SpecSet.conflicts() -> [message]                 a field with two meanings, a stale "since"

Every field the specs define becomes a ``FieldDef`` keyed by (level, name); a level whose members
depend on the question or answer type is keyed ``question[choice]`` for the members that differ.
Two specs that type one key differently give that field two meanings, which ``vllm-sr schemas
check`` refuses.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from systemone import fieldtypes

# Package data; ``vllm-sr schemas`` reads it under a root (a checkout, or site-packages).
SPEC_DIR = "systemone/spec"
STANDARD_FILE = "systemone-0.2.schema.yaml"
EXTENSIONS_FILE = "vllm-sr-5.0.extensions.yaml"
LEGACY_FILE = "vllm-sr-4.0.openapi.yaml"
SPEC_FILES: Mapping[str, str] = {
    "systemone/0.2": STANDARD_FILE,
    "vllm-sr/5.0": EXTENSIONS_FILE,
    "vllm-sr/4.0": LEGACY_FILE,
}

# The levels a 4.0 document shares with the standard and the extension set.
_SHARED_LEVELS = ("request", "options", "question", "answer", "response")
_DISCRIMINATED = ("question", "answer")


class SpecError(ValueError):
    """A spec document that cannot be read as a spec."""


@dataclass(frozen=True, slots=True)
class FieldDef:
    spec: str
    level: str
    name: str
    type: str | None  # None: the document names the field without typing it
    bounds: tuple[tuple[str, Any], ...] = ()
    required: bool = False

    @property
    def meaning(self) -> str:
        bounds = ", ".join(f"{k} {v}" for k, v in self.bounds)
        return f"{self.type}" + (f" ({bounds})" if bounds else "")


@dataclass(frozen=True)
class SpecSet:
    texts: Mapping[str, str]
    standard: Mapping[str, Any]
    extensions: Mapping[str, Any]
    legacy: Mapping[str, Any]
    defs: tuple[FieldDef, ...] = field(default=())

    def sha256(self, file: str) -> str:
        return hashlib.sha256(self.texts[file].encode("utf-8")).hexdigest()

    # -- the extension set
    @property
    def fields(self) -> list[dict[str, Any]]:
        return list(self.extensions["fields"])

    def fields_at(self, level: str) -> list[dict[str, Any]]:
        return [f for f in self.extensions["fields"] if f["level"] == level]

    # -- the legacy contract
    @property
    def legacy_forms(self) -> list[dict[str, Any]]:
        return list(self.legacy["components"]["x-vllm-sr-legacy-forms"])

    @property
    def implicit_roles(self) -> dict[str, str]:
        return dict(self.legacy["components"]["x-vllm-sr-implicit-roles"])

    def legacy_members(self, level: str) -> dict[str, FieldDef]:
        return {d.name: d for d in self.defs if d.spec == LEGACY_FILE and d.level == level}

    # -- the standard
    def standard_members(self, level: str, kind: str | None = None) -> dict[str, dict[str, Any]]:
        entry = self.standard["levels"][level]
        if kind is None:
            return dict(entry["members"])
        return dict(entry["types"][kind]["members"])

    def standard_types(self, level: str) -> list[str]:
        return list(self.standard["levels"][level]["types"])

    def conflicts(self) -> list[str]:
        return list(_conflicts(self))


def parse_specs(texts: Mapping[str, str]) -> SpecSet:
    docs = {}
    for file in (STANDARD_FILE, EXTENSIONS_FILE, LEGACY_FILE):
        if file not in texts:
            raise SpecError(f"{file}: missing")
        try:
            docs[file] = yaml.safe_load(texts[file])
        except yaml.YAMLError as exc:
            raise SpecError(f"{file}: not YAML: {exc}") from None
        if not isinstance(docs[file], dict):
            raise SpecError(f"{file}: not a mapping")
    specs = SpecSet(dict(texts), docs[STANDARD_FILE], docs[EXTENSIONS_FILE], docs[LEGACY_FILE])
    defs = [*_standard_defs(specs.standard), *_extension_defs(specs.extensions), *_legacy_defs(specs.legacy)]
    for d in defs:
        if d.type is not None:
            try:
                fieldtypes.parse(d.type)
            except ValueError as exc:
                raise SpecError(f"{d.spec}: {d.level}.{d.name}: {exc}") from None
    return SpecSet(specs.texts, specs.standard, specs.extensions, specs.legacy, tuple(defs))


def _bounds(entry: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple((k, entry[k]) for k in fieldtypes.BOUND_KEYS if k in entry)


def _standard_defs(doc: Mapping[str, Any]) -> Iterator[FieldDef]:
    for level, entry in doc["levels"].items():
        if "types" not in entry:
            for name, m in entry["members"].items():
                yield FieldDef(STANDARD_FILE, level, str(name), m["type"], _bounds(m), bool(m.get("required")))
            continue
        per_name: dict[str, dict[str, FieldDef]] = {}
        for kind, t in entry["types"].items():
            for name, m in t["members"].items():
                per_name.setdefault(name, {})[kind] = FieldDef(
                    STANDARD_FILE, f"{level}[{kind}]", name, m["type"], _bounds(m), bool(m.get("required"))
                )
        for name, by_kind in per_name.items():
            meanings = {d.meaning for d in by_kind.values()}
            if len(meanings) == 1 and len(by_kind) == len(entry["types"]):
                one = next(iter(by_kind.values()))
                yield FieldDef(STANDARD_FILE, level, name, one.type, one.bounds, one.required)
            else:
                yield from by_kind.values()
    for ep in doc["endpoints"]:
        yield FieldDef(STANDARD_FILE, "endpoint", f"{ep['method']} {ep['path']}", None)


def _extension_defs(doc: Mapping[str, Any]) -> Iterator[FieldDef]:
    for f in doc["fields"]:
        level, name = f["level"], f["name"]
        if level == "question_type":
            yield FieldDef(EXTENSIONS_FILE, "question_type", name, None)
            if "criteria" in f:
                c = f["criteria"]
                yield FieldDef(EXTENSIONS_FILE, f"question[{name}]", "criteria", c["type"], _bounds(c))
        elif level == "asset_type":
            yield FieldDef(EXTENSIONS_FILE, "asset_type", name, None)
            yield FieldDef(EXTENSIONS_FILE, f"asset[{name}]", "format", f"enum({'|'.join(f['formats'])})")
        else:
            yield FieldDef(EXTENSIONS_FILE, level, name, f.get("type"), _bounds(f))


def _legacy_defs(doc: Mapping[str, Any]) -> Iterator[FieldDef]:
    schemas = doc["components"]["schemas"]
    for comp in schemas.values():
        level = comp.get("x-vllm-sr-level")
        if level is None:
            continue
        required = set(comp.get("required", ()))
        for name, prop in comp.get("properties", {}).items():
            yield FieldDef(LEGACY_FILE, level, name, _oas_type(prop, schemas), _oas_bounds(prop), name in required)
    for path, ops in doc["paths"].items():
        for method in ops:
            yield FieldDef(LEGACY_FILE, "endpoint", f"{method.upper()} {path}", None)
    kinds = schemas["Question"]["properties"]["type"]["enum"]
    for kind in kinds:
        yield FieldDef(LEGACY_FILE, "question_type", kind, None)


def _oas_type(schema: Mapping[str, Any], components: Mapping[str, Any]) -> str | None:
    """An OpenAPI schema in the shared notation; None when it states no type."""
    if "x-vllm-sr-type" in schema:
        return str(schema["x-vllm-sr-type"])
    if "$ref" in schema:
        target = components[schema["$ref"].rsplit("/", 1)[1]]
        if "x-vllm-sr-type" in target:
            return str(target["x-vllm-sr-type"])
        return f"object:{target['x-vllm-sr-level']}"
    if "oneOf" in schema:
        parts = [_oas_type(s, components) for s in schema["oneOf"]]
        typed = [p for p in parts if p is not None]
        if len(typed) != len(parts):
            return None  # an alternative that states no type: the union states none either
        nullable = "null" in typed
        rest = [p for p in typed if p != "null"]
        if sorted(rest) == ["array<any>", "map<any>", "string"]:
            rest = ["text"]
        if len(rest) != 1:
            return None
        return rest[0] + ("?" if nullable and not rest[0].endswith("?") else "")
    kind = schema.get("type")
    if kind is None:
        return None
    nullable = False
    if isinstance(kind, list):
        nullable = "null" in kind
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0]
    q = "?" if nullable else ""
    if kind == "null":
        return "null"
    if kind == "string" and "enum" in schema:
        return f"enum({'|'.join(schema['enum'])})" + q
    if kind in ("string", "integer", "number", "boolean"):
        return kind + q
    if kind == "array":
        item = _oas_type(schema["items"], components) if "items" in schema else "any"
        return f"array<{item or 'any'}>" + q
    if kind == "object":
        extra = schema.get("additionalProperties")
        item = _oas_type(extra, components) if isinstance(extra, dict) else "any"
        return f"map<{item or 'any'}>" + q
    return None


def _oas_bounds(schema: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    names = {
        "minimum": "minimum",
        "maximum": "maximum",
        "exclusiveMinimum": "exclusive_minimum",
        "minItems": "min_items",
        "minProperties": "min_items",
        "maxItems": "max_items",
        "maxProperties": "max_items",
    }
    found = {names[k]: v for k, v in schema.items() if k in names}
    return tuple((k, found[k]) for k in fieldtypes.BOUND_KEYS if k in found)


def _conflicts(specs: SpecSet) -> Iterator[str]:
    by_key: dict[tuple[str, str], list[FieldDef]] = {}
    for d in specs.defs:
        by_key.setdefault((d.level, d.name), []).append(d)
    for (level, name), defs in by_key.items():
        files = [d.spec for d in defs]
        if STANDARD_FILE in files and EXTENSIONS_FILE in files:
            yield (
                f"{level}.{name}: defined by {STANDARD_FILE} and again by {EXTENSIONS_FILE}; an extension may "
                "not redefine a standard field"
            )
        if len(set(files)) != len(files):
            dup = sorted({f for f in files if files.count(f) > 1})
            yield f"{level}.{name}: defined twice in {', '.join(dup)}"
        typed = [d for d in defs if d.type is not None]
        for other in typed[1:]:
            if other.meaning != typed[0].meaning:
                yield (
                    f"{level}.{name}: two meanings: {typed[0].spec} says {typed[0].meaning}, "
                    f"{other.spec} says {other.meaning}"
                )
    yield from _since_rules(specs, by_key)


def _since_rules(specs: SpecSet, by_key: Mapping[tuple[str, str], list[FieldDef]]) -> Iterator[str]:
    """The extension set's "since" must agree with the frozen 4.0 contract, and every 4.0-only
    member must be one of the legacy forms."""

    def in_legacy(level: str, name: str) -> bool:
        return any(d.spec == LEGACY_FILE for d in by_key.get((level, name), ()))

    for f in specs.fields:
        level = f["level"]
        if level not in (*_SHARED_LEVELS, "question_type", "endpoint"):
            continue
        present = in_legacy(level, f["name"])
        if str(f["since"]) == "4.0" and not present:
            yield f"{level}.{f['name']}: the extension set says since 4.0, but {LEGACY_FILE} does not define it"
        if str(f["since"]) != "4.0" and present:
            yield (
                f"{level}.{f['name']}: the extension set says since {f['since']}, but {LEGACY_FILE} already defines it"
            )
    claimed = {m for form in specs.legacy_forms for m in form.get("members", ())}
    for d in specs.defs:
        if d.spec != LEGACY_FILE or d.level not in _SHARED_LEVELS:
            continue
        known = {
            spec
            for spec in (STANDARD_FILE, EXTENSIONS_FILE)
            for key in _keys(d.level, d.name, specs)
            if any(x.spec == spec for x in by_key.get(key, ()))
        }
        if not known and f"{d.level}.{d.name}" not in claimed:
            yield (
                f"{d.level}.{d.name}: {LEGACY_FILE} defines it, but it is neither standard, an extension nor a "
                "listed legacy form"
            )


def _keys(level: str, name: str, specs: SpecSet) -> list[tuple[str, str]]:
    keys = [(level, name)]
    if level in _DISCRIMINATED:
        keys += [(f"{level}[{kind}]", name) for kind in specs.standard["levels"][level]["types"]]
        keys += [(f"{level}[{f['name']}]", name) for f in specs.fields_at("question_type")]
    return keys
