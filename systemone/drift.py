"""Compare our systemone/0.2 description with a published document (pure: texts in, lines out).

    drift(our_spec_text, published_text) -> ["SystemOneRequest.assets: missing from the published document", ...]

A published document is either the OpenAPI JSON (or YAML) the API serves, or the pydantic
models that datamodel-codegen generates from it (what the official SDK ships as
``typesafe_sdk/_schemas/models.py``). Both are reduced to one surface: component -> field ->
(type in the shared notation, required, bounds), and compared with ours, component by component.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from systemone import fieldtypes


@dataclass(frozen=True, slots=True)
class Member:
    type: str
    required: bool
    bounds: tuple[tuple[str, Any], ...] = ()


Surface = dict[str, dict[str, Member]]


class DriftError(ValueError):
    """A document that is neither an OpenAPI document nor generated pydantic models."""


def drift(our_spec_text: str, published_text: str) -> list[str]:
    ours, names = our_surface(yaml.safe_load(our_spec_text))
    return compare(ours, published_surface(published_text, names))


def our_surface(doc: Mapping[str, Any]) -> tuple[Surface, dict[str, str]]:
    """Our spec as a surface, and the map from published component names to our level names."""
    surface: Surface = {}
    names: dict[str, str] = {}
    for level, entry in doc["levels"].items():
        if "published_as" in entry:
            names[entry["published_as"]] = level
        parts = entry.get("types", {level: entry}).values() if "types" in entry else [entry]
        for part in parts:
            component = part.get("published_as")
            if component is None or "members" not in part:
                continue
            names.setdefault(component, level)
            surface[component] = {
                str(name): Member(
                    str(fieldtypes.parse(m["type"])),
                    bool(m.get("required")),
                    tuple(sorted(m["published"].items())) if "published" in m else _bounds(m),
                )
                for name, m in part["members"].items()
            }
    return surface, names


def _bounds(m: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, m[k]) for k in ("min_items", "max_items") if k in m))


def published_surface(text: str, names: Mapping[str, str]) -> Surface:
    stripped = text.lstrip()
    if stripped.startswith("{") or stripped.startswith("openapi") or "\nopenapi:" in text:
        doc = json.loads(text) if stripped.startswith("{") else yaml.safe_load(text)
        if not isinstance(doc, dict) or "components" not in doc:
            raise DriftError("an OpenAPI document needs components.schemas")
        return _openapi_surface(doc["components"]["schemas"], names)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        raise DriftError("neither an OpenAPI document (JSON or YAML) nor a Python module of pydantic models") from None
    return _models_surface(tree, names)


# ---------------------------------------------------------------------------- OpenAPI


def _openapi_surface(schemas: Mapping[str, Any], names: Mapping[str, str]) -> Surface:
    surface: Surface = {}
    for component, schema in schemas.items():
        if "properties" not in schema:
            continue
        required = set(schema.get("required", ()))
        surface[component] = {
            name: Member(_oas(prop, schemas, names), name in required, _oas_bounds(prop))
            for name, prop in schema["properties"].items()
        }
    return surface


def _oas(schema: Mapping[str, Any], schemas: Mapping[str, Any], names: Mapping[str, str]) -> str:
    if "$ref" in schema:
        target = schema["$ref"].rsplit("/", 1)[1]
        if target in names:
            return f"object:{names[target]}"
        return _oas(schemas[target], schemas, names)
    union = schema.get("anyOf") or schema.get("oneOf")
    if union:
        if "discriminator" in schema and schema.get("title") in names:
            return f"object:{names[schema['title']]}"
        return _union([_oas(s, schemas, names) for s in union])
    if "const" in schema:
        return f"enum({schema['const']})"
    kind = schema.get("type")
    if kind == "string" and "enum" in schema:
        return f"enum({'|'.join(schema['enum'])})"
    if kind in ("string", "integer", "number", "boolean", "null"):
        return str(kind)
    if kind == "array":
        return f"array<{_oas(schema.get('items') or {}, schemas, names)}>"
    if kind == "object":
        extra = schema.get("additionalProperties")
        return f"map<{_oas(extra, schemas, names) if isinstance(extra, dict) else 'any'}>"
    return "any"


def _oas_bounds(schema: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    keys = {
        "minItems": "min_items",
        "minProperties": "min_items",
        "maxItems": "max_items",
        "maxProperties": "max_items",
    }
    found = {keys[k]: v for k, v in schema.items() if k in keys}
    for branch in schema.get("anyOf") or schema.get("oneOf") or ():  # pydantic bounds the non-null branch
        found.update({keys[k]: v for k, v in branch.items() if k in keys})
    return tuple(sorted(found.items()))


def _union(parts: list[str]) -> str:
    nullable = "null" in parts
    rest = sorted({p for p in parts if p != "null"})
    if rest == ["any"]:
        return "any"  # any already admits null
    if rest == ["array<any>", "map<any>", "string"]:
        rest = ["text"]
    if len(rest) != 1:
        return "any" + ("?" if nullable else "")
    return rest[0] + ("?" if nullable else "")


# ---------------------------------------------------------------------------- pydantic models


def _models_surface(tree: ast.Module, names: Mapping[str, str]) -> Surface:
    enums = {
        node.name: [n.value.value for n in node.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)]
        for node in tree.body
        if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "Enum" for b in node.bases)
    }
    surface: Surface = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or not any(ast.unparse(b) == "BaseModel" for b in node.bases):
            continue
        members = {}
        for stmt in node.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            required, bounds = _field_call(stmt.value)
            members[stmt.target.id] = Member(_py_type(stmt.annotation, enums, names), required, bounds)
        surface[node.name] = members
    return surface


def _field_call(value: ast.expr | None) -> tuple[bool, tuple[tuple[str, Any], ...]]:
    if not isinstance(value, ast.Call):
        return value is None, ()
    required = bool(value.args) and isinstance(value.args[0], ast.Constant) and value.args[0].value is Ellipsis
    bounds = []
    for kw in value.keywords:
        if kw.arg in ("min_length", "max_length") and isinstance(kw.value, ast.Constant):
            bounds.append(("min_items" if kw.arg == "min_length" else "max_items", kw.value.value))
    return required, tuple(sorted(bounds))


def _py_type(node: ast.expr, enums: Mapping[str, list[Any]], names: Mapping[str, str]) -> str:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union([_py_type(n, enums, names) for n in _flatten(node)])
    if isinstance(node, ast.Constant) and node.value is None:
        return "null"
    if isinstance(node, ast.Name):
        simple = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "Any": "any"}
        if node.id in simple:
            return simple[node.id]
        if node.id in enums:
            return f"enum({'|'.join(str(v) for v in enums[node.id])})"
        if node.id in names:
            return f"object:{names[node.id]}"
        return "any"
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value)
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Literal":
            return f"enum({'|'.join(str(a.value) for a in args if isinstance(a, ast.Constant))})"
        if head == "list":
            return f"array<{_py_type(args[0], enums, names)}>"
        if head == "dict":
            return f"map<{_py_type(args[-1], enums, names)}>"
    return "any"


def _flatten(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _flatten(node.left) + _flatten(node.right)
    return [node]


# ---------------------------------------------------------------------------- comparing


def compare(ours: Surface, theirs: Surface) -> list[str]:
    out: list[str] = []
    for component, members in ours.items():
        if component not in theirs:
            out.append(f"{component}: not in the published document")
            continue
        published = theirs[component]
        for name, ours_m in members.items():
            if name not in published:
                out.append(f"{component}.{name}: ours only (the published document has no such field)")
                continue
            theirs_m = published[name]
            if ours_m.type != theirs_m.type:
                out.append(f"{component}.{name}: type: ours {ours_m.type}, published {theirs_m.type}")
            if ours_m.required != theirs_m.required:
                out.append(
                    f"{component}.{name}: ours {'requires' if ours_m.required else 'does not require'} it, "
                    f"the published document {'does' if theirs_m.required else 'does not'}"
                )
            if ours_m.bounds != theirs_m.bounds:
                out.append(
                    f"{component}.{name}: bounds: ours {dict(ours_m.bounds) or 'none'}, published "
                    f"{dict(theirs_m.bounds) or 'none'}"
                )
        for name in published:
            if name not in members:
                out.append(f"{component}.{name}: published only (our description lacks it)")
    return out
