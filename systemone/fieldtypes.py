"""The type notation the three specs share, and checking a JSON value against it.

    string integer number boolean any      scalars (integer: a number with an integral value)
    text                                   a string, an object or an array ("structured text")
    enum(a|b)                              one of the listed strings
    map<T>  array<T>                       an object with caller-chosen keys; an array
    object:NAME                            a structure of one level (checked by its own reader)
    T?                                     T or null

``problems(type, value, bounds)`` returns ``(path, message, kind)`` triples, where ``kind`` is
the FastAPI-style error type a 422 entry carries (``string_type``, ``too_long``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from systemone.jsontext import JsonObject, Number

Problem = tuple[tuple[str | int, ...], str, str]


@dataclass(frozen=True, slots=True)
class Type:
    kind: str  # string integer number boolean any text enum map array object
    nullable: bool = False
    item: Type | None = None
    choices: tuple[str, ...] = ()
    ref: str = ""

    def __str__(self) -> str:
        if self.kind == "enum":
            body = f"enum({'|'.join(self.choices)})"
        elif self.kind in ("map", "array"):
            body = f"{self.kind}<{self.item}>"
        elif self.kind == "object":
            body = f"object:{self.ref}"
        else:
            body = self.kind
        return body + ("?" if self.nullable else "")


_SCALARS = {"string", "integer", "number", "boolean", "any", "text"}


@cache
def parse(expr: str) -> Type:
    """Parse a type expression; raise ValueError naming what is wrong with it."""
    text = expr.replace(" ", "")
    nullable = text.endswith("?")
    if nullable:
        text = text[:-1]
    if text in _SCALARS:
        return Type(text, nullable)
    if text.startswith("enum(") and text.endswith(")"):
        choices = tuple(text[5:-1].split("|"))
        if not all(choices):
            raise ValueError(f"empty choice in {expr!r}")
        return Type("enum", nullable, choices=choices)
    for kind in ("map", "array"):
        if text.startswith(kind + "<") and text.endswith(">"):
            return Type(kind, nullable, item=parse(text[len(kind) + 1 : -1]))
    if text.startswith("object:") and len(text) > 7:
        return Type("object", nullable, ref=text[7:])
    raise ValueError(f"unknown type {expr!r}")


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (Number, int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array"


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, Number):
        return value.value
    if isinstance(value, (int, float)):
        return value
    return None


def problems(t: Type | str, value: Any, bounds: Mapping[str, Any] | None = None) -> list[Problem]:
    """Every way ``value`` fails ``t`` (and its bounds), each located below the value."""
    if isinstance(t, str):
        t = parse(t)
    out: list[Problem] = []
    _check(t, value, (), out)
    if not out and bounds and value is not None:
        _bounds(value, bounds, out)
    return out


_KIND_ERROR = {
    "string": ("a string", "string_type"),
    "integer": ("an integer", "int_type"),
    "number": ("a number", "float_type"),
    "boolean": ("true or false", "bool_type"),
    "text": ("a string, object or array", "union_type"),
    "map": ("an object", "dict_type"),
    "array": ("an array", "list_type"),
    "object": ("an object", "dict_type"),
}


def _check(t: Type, value: Any, at: tuple[str | int, ...], out: list[Problem]) -> None:
    if value is None:
        if not t.nullable and t.kind != "any":
            want, kind = _KIND_ERROR.get(t.kind, ("a value", "missing"))
            out.append((at, f"must be {want}, not null", kind))
        return
    k = t.kind
    if k == "any":
        return
    if k == "string" and isinstance(value, str):
        return
    if k == "boolean" and isinstance(value, bool):
        return
    if k in ("number", "integer"):
        n = _number(value)
        if n is not None:
            if k == "integer" and not float(n).is_integer():
                out.append((at, "must be an integer", "int_from_float"))
            return
    if k == "text" and isinstance(value, (str, dict, tuple, list)):
        return
    if k == "enum":
        if isinstance(value, str) and value in t.choices:
            return
        out.append((at, f"must be one of {', '.join(t.choices)}", "enum"))
        return
    if k in ("map", "object") and isinstance(value, dict):
        if k == "map" and t.item is not None:
            for name, item in value.items():
                _check(t.item, item, at + (name,), out)
        return
    if k == "array" and isinstance(value, (tuple, list)):
        if t.item is not None:
            for i, item in enumerate(value):
                _check(t.item, item, at + (i,), out)
        return
    want, kind = _KIND_ERROR[k]
    out.append((at, f"must be {want}, not {type_name(value)}", kind))


def _bounds(value: Any, bounds: Mapping[str, Any], out: list[Problem]) -> None:
    n = _number(value)
    if n is not None:
        if "minimum" in bounds and n < bounds["minimum"]:
            out.append(((), f"must be at least {bounds['minimum']}", "greater_than_equal"))
        if "maximum" in bounds and n > bounds["maximum"]:
            out.append(((), f"must be at most {bounds['maximum']}", "less_than_equal"))
        if "exclusive_minimum" in bounds and n <= bounds["exclusive_minimum"]:
            out.append(((), f"must be more than {bounds['exclusive_minimum']}", "greater_than"))
        return
    if isinstance(value, (dict, tuple, list)):

        def what(n: int) -> str:
            return ("entry" if n == 1 else "entries") if isinstance(value, dict) else ("item" if n == 1 else "items")

        if "min_items" in bounds and len(value) < bounds["min_items"]:
            n = bounds["min_items"]
            out.append(((), f"needs at least {n} {what(n)}, not {len(value)}", "too_short"))
        if "max_items" in bounds and len(value) > bounds["max_items"]:
            n = bounds["max_items"]
            out.append(((), f"takes at most {n} {what(n)}, not {len(value)}", "too_long"))


BOUND_KEYS = ("minimum", "maximum", "exclusive_minimum", "min_items", "max_items")


# The exact Python types that always pass a scalar kind: a map or array of them is checked in
# C (``set(map(type, items))``); any other item (a subclass, a wrong type) goes through ``item``.
_EXACT_TYPES: dict[str, frozenset[type]] = {
    "string": frozenset({str}),
    "boolean": frozenset({bool}),
    "text": frozenset({str, dict, JsonObject, tuple, list}),
}


def _compile(t: Type) -> Callable[[Any], bool]:
    """A fast yes/no for ``t`` (bounds aside); ``problems`` explains a no."""
    k = t.kind
    check: Callable[[Any], bool]
    if k == "any":
        return lambda v: True
    if k == "string":
        check = lambda v: isinstance(v, str)  # noqa: E731
    elif k == "boolean":
        check = lambda v: isinstance(v, bool)  # noqa: E731
    elif k == "text":
        check = lambda v: isinstance(v, (str, dict, tuple, list))  # noqa: E731
    elif k == "enum":
        choices = frozenset(t.choices)
        check = lambda v: isinstance(v, str) and v in choices  # noqa: E731
    elif k in ("number", "integer"):
        check = _numeric(k == "integer")
    elif k == "object":
        check = lambda v: isinstance(v, dict)  # noqa: E731
    else:
        check = _container(k, t.item)
    if t.nullable:
        inner = check
        return lambda v: v is None or inner(v)
    return check


def _numeric(integer: bool) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:  # as ``_check`` decides for numbers
        n = _number(value)
        return n is not None and (not integer or float(n).is_integer())

    return check


def _container(kind: str, item_type: Type | None) -> Callable[[Any], bool]:
    item = _compile(item_type) if item_type is not None else (lambda v: True)
    exact = _EXACT_TYPES.get(item_type.kind) if item_type is not None else None
    if exact is not None and item_type is not None and item_type.nullable:
        exact = exact | {type(None)}
    if kind == "map":
        if item_type is None or item_type.kind == "any":
            return lambda v: isinstance(v, dict)
        if exact is not None:
            return lambda v: isinstance(v, dict) and (set(map(type, v.values())) <= exact or all(map(item, v.values())))
        return lambda v: isinstance(v, dict) and all(map(item, v.values()))
    if item_type is None or item_type.kind == "any":
        return lambda v: isinstance(v, (tuple, list))
    if exact is not None:
        return lambda v: isinstance(v, (tuple, list)) and (set(map(type, v)) <= exact or all(map(item, v)))
    return lambda v: isinstance(v, (tuple, list)) and all(map(item, v))


@cache
def checker(expr: str) -> Callable[[Any], bool]:
    return _compile(parse(expr))


def valid(expr: str, value: Any, bounds: Mapping[str, Any] | None = None) -> bool:
    """``not problems(expr, value, bounds)``, fast when the answer is yes."""
    if not checker(expr)(value):
        return False
    if bounds and value is not None:
        if isinstance(value, (dict, tuple, list)) and set(bounds) <= {"min_items", "max_items"}:
            return bounds.get("min_items", 0) <= len(value) <= bounds.get("max_items", len(value))
        return not problems(expr, value, bounds)
    return True


def validator(expr: str, bounds: Mapping[str, Any] | None = None) -> Callable[[Any], bool]:
    """``valid(expr, value, bounds)`` as one function: built once for a field every request has."""
    check = checker(expr)
    if not bounds:
        return check
    if set(bounds) <= {"min_items", "max_items"}:
        low, high = bounds.get("min_items", 0), bounds.get("max_items")

        def sized(value: Any) -> bool:
            if not check(value):
                return False
            if value is None or not isinstance(value, (dict, tuple, list)):
                return True
            return low <= len(value) and (high is None or len(value) <= high)

        return sized

    def bounded(value: Any) -> bool:
        if not check(value):
            return False
        out: list[Problem] = []
        if value is not None:
            _bounds(value, bounds, out)
        return not out

    return bounded
