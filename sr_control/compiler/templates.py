"""Envoy templates: YAML documents in ``sr_control/envoy_templates/``, loaded once and filled as data.

A template is a tree of mappings, lists and scalars. A scalar that is exactly ``$name`` is
replaced by the value given for ``name`` (a number, a mapping, a list: data, never text), and
``${name}`` inside a longer string is replaced by the value's text. A ``$name`` given None drops
its mapping key or list item, so optional fields need no conditionals in the YAML. Filling
checks that every placeholder gets a value and every value has a placeholder, so a misspelled
name fails at once instead of leaving ``$nme`` for Envoy to reject.

    fill("route/local_reply", name=..., match=..., status=404, body=..., headers=[...]) -> dict

Each template is compiled once into a builder; parts without placeholders are shared between
fills, so a filled tree is read, never modified. The templates are package data, read through
``importlib.resources``, so an installed wheel finds them as a checkout does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import yaml

TEMPLATES_PACKAGE = "sr_control.envoy_templates"

_WHOLE = re.compile(r"^\$([a-z_][a-z0-9_]*)$")
_INLINE = re.compile(r"\$\{([a-z_][a-z0-9_]*)\}")
_DROP = object()

Build = Callable[[Mapping[str, Any]], Any]


class TemplateError(LookupError):
    """A template that does not exist, or a fill whose values do not match its placeholders."""


class _Const:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _constant(value: Any) -> Build:
    return lambda values: value


class Template:
    def __init__(self, name: str, tree: Any) -> None:
        self.name = name
        self.params: frozenset[str] = frozenset(_params(tree))
        built = _compile(tree)
        self._build: Build = _constant(built.value) if isinstance(built, _Const) else built

    def fill(self, values: Mapping[str, Any]) -> Any:
        if values.keys() != self.params:
            missing = self.params - values.keys()
            extra = values.keys() - self.params
            parts = []
            if missing:
                parts.append(f"missing {', '.join(sorted(missing))}")
            if extra:
                parts.append(f"no placeholder for {', '.join(sorted(extra))}")
            raise TemplateError(f"template {self.name}: {'; '.join(parts)}")
        return self._build(values)


def _compile(node: Any) -> _Const | Build:
    """A builder for ``node``, or _Const when ``node`` has no placeholders."""
    if isinstance(node, dict):
        parts = [(k, _compile(v)) for k, v in node.items()]
        if all(isinstance(p, _Const) for _, p in parts):
            return _Const(node)
        consts = {k: p.value for k, p in parts if isinstance(p, _Const)}
        builds = [(k, p) for k, p in parts if not isinstance(p, _Const)]

        def build_dict(values: Mapping[str, Any]) -> Any:
            out = dict(consts)
            for key, build in builds:
                value = build(values)
                if value is not _DROP:
                    out[key] = value
            return out

        return build_dict
    if isinstance(node, list):
        items = [_compile(v) for v in node]
        if all(isinstance(p, _Const) for p in items):
            return _Const(node)

        def build_list(values: Mapping[str, Any]) -> Any:
            out = []
            for item in items:
                value = item.value if isinstance(item, _Const) else item(values)
                if value is not _DROP:
                    out.append(value)
            return out

        return build_list
    if isinstance(node, str):
        whole = _WHOLE.match(node)
        if whole:
            name = whole[1]

            def build_value(values: Mapping[str, Any]) -> Any:
                value = values[name]
                return _DROP if value is None else value

            return build_value
        if "${" in node:
            return lambda values: _INLINE.sub(lambda m: str(values[m[1]]), node)
    return _Const(node)


def _params(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set().union(*(_params(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(_params(v) for v in node)) if node else set()
    if isinstance(node, str):
        whole = _WHOLE.match(node)
        return {whole[1]} if whole else set(_INLINE.findall(node))
    return set()


def template_files() -> list[Traversable]:
    """The template documents, by name."""
    folder = resources.files(TEMPLATES_PACKAGE)
    return sorted((f for f in folder.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)


@cache
def templates() -> Mapping[str, Template]:
    """Every template as ``file/key`` (``route/local_reply``), read once per process."""
    out: dict[str, Template] = {}
    for file in template_files():
        stem = file.name.removesuffix(".yaml")
        doc = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        for key, tree in doc.items():
            out[f"{stem}/{key}"] = Template(f"{stem}/{key}", tree)
    return out


def fill(template_name: str, /, **values: Any) -> Any:
    try:
        template = templates()[template_name]
    except KeyError:
        raise TemplateError(
            f"no template {template_name!r} in {TEMPLATES_PACKAGE} (have: {', '.join(templates())})"
        ) from None
    return template.fill(values)


__all__ = ["TEMPLATES_PACKAGE", "Template", "TemplateError", "fill", "template_files", "templates"]
