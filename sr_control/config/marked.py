"""A fast YAML reader that remembers where every value came from.

Validation reads every config on every reload (``xds serve`` reads the file each time it
changes), so it uses libyaml through PyYAML's C loader: about 7x faster than ruamel.yaml's
round-trip loader, which ``config migrate`` keeps for comments and quoting. Scalars resolve by
the YAML 1.2 core schema, as ruamel.yaml reads them: ``no``, ``on`` and ``010`` stay what a
1.2 reader says (a string, a string, ten), never YAML 1.1's surprises. A key given twice is an
error, not a silent override.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from sr_control.config.errors import Loc, Problem

# (key line, key column, value line, value column), 0-based; a list item's key is its dash.
Mark = tuple[int, int, int, int]
# Where a value sits in the YAML as written: its mapping keys are any YAML scalar, not only the
# str and int of a Loc (what pydantic reports, and what ``position`` looks up).
YamlPath = tuple[str | int | float | bool | None, ...]


class YamlSyntaxError(Exception):
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(str(problem))


@dataclass
class Marked:
    """Plain data (dicts, lists, scalars) and the position of every value in it."""

    data: Any
    marks: dict[YamlPath, Mark] = field(default_factory=dict)

    def position(self, loc: Loc, *, at_key: bool = False) -> tuple[int, int]:
        """1-based (line, column) of ``loc``, or of the deepest part of it that exists.

        A scalar is pointed at where its value starts; a mapping or list at its key (or dash),
        which is where a reader looks; ``at_key`` always points at the key, for unknown keys.
        """
        line, col = self.marks.get((), (0, 0, 0, 0))[2:]
        node = self.data
        for i in range(len(loc)):
            part = loc[i]
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            else:
                break
            mark = self.marks.get(loc[: i + 1])
            if mark is None:
                continue
            on_key = (at_key and i == len(loc) - 1) or isinstance(node, (dict, list))
            line, col = mark[:2] if on_key else mark[2:]
        return line + 1, col + 1


class _CoreLoader(yaml.CSafeLoader):
    """libyaml's parser with the YAML 1.2 core schema's scalar resolution."""


_CoreLoader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+0123456789."),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:merge", r"^(?:<<)$", "<"),
):
    _CoreLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


def _int(loader: yaml.BaseLoader, node: yaml.ScalarNode) -> int:
    text = str(node.value)
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _float(loader: yaml.BaseLoader, node: yaml.ScalarNode) -> float:
    text = str(node.value).lower()
    if text.endswith(".inf"):
        return -math.inf if text.startswith("-") else math.inf
    if text == ".nan":
        return math.nan
    return float(text)


def _bool(loader: yaml.BaseLoader, node: yaml.ScalarNode) -> bool:
    return str(node.value).lower() == "true"


_CoreLoader.add_constructor("tag:yaml.org,2002:int", _int)
_CoreLoader.add_constructor("tag:yaml.org,2002:float", _float)
_CoreLoader.add_constructor("tag:yaml.org,2002:bool", _bool)


def read(text: str, file: str) -> Marked:
    """Parse ``text``; an empty file is an empty mapping. Raises YamlSyntaxError."""
    loader = _CoreLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return Marked({}, {(): (0, 0, 0, 0)})
        marked = Marked(None)
        marked.data = _build(loader, root, (), marked.marks, file)
        marked.marks[()] = (root.start_mark.line, root.start_mark.column) * 2
        return marked
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        reason = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise YamlSyntaxError(Problem(file, line, col, (), f"invalid YAML: {reason}")) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(Problem(file, 1, 1, (), f"invalid YAML: {exc}")) from None
    finally:
        loader.dispose()


def _build(loader: Any, node: Any, loc: YamlPath, marks: dict[YamlPath, Mark], file: str) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_object(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, child in enumerate(node.value):
            here = loc + (i,)
            marks[here] = (child.start_mark.line, child.start_mark.column) * 2
            items.append(_build(loader, child, here, marks, file))
        return items
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        loader.flatten_mapping(node)  # `<<` merge keys, as ruamel.yaml reads them
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a scalar", key_node.start_mark)
            here = loc + (key,)
            marks[here] = (key_node.start_mark.line, key_node.start_mark.column, value_node.start_mark.line, value_node.start_mark.column)
            out[key] = _build(loader, value_node, here, marks, file)
        return out
    raise yaml.constructor.ConstructorError(None, None, f"unexpected YAML node {node.tag}", node.start_mark)


def from_round_trip(doc: Any) -> Marked:
    """A ruamel.yaml round-trip tree (after an in-memory migration) as Marked data."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    marks: dict[YamlPath, Mark] = {}

    def walk(node: Any, loc: YamlPath) -> Any:
        if isinstance(node, CommentedMap):
            out = {}
            for key, value in node.items():
                try:
                    kl, kc = node.lc.key(key)
                    vl, vc = node.lc.value(key)
                    if None not in (kl, kc, vl, vc):
                        marks[loc + (key,)] = (kl, kc, vl, vc)
                except (KeyError, TypeError):
                    pass
                out[_scalar(key)] = walk(value, loc + (key,))
            return out
        if isinstance(node, CommentedSeq):
            items = []
            for i, value in enumerate(node):
                try:
                    line, col = node.lc.item(i)
                    if line is not None:
                        marks[loc + (i,)] = (line, col, line, col)
                except (KeyError, TypeError, IndexError):
                    pass
                items.append(walk(value, loc + (i,)))
            return items
        return _scalar(node)

    data = walk(doc, ())
    lc = getattr(doc, "lc", None)
    root = (lc.line or 0, lc.col or 0) if lc is not None and lc.line is not None else (0, 0)
    marks[()] = root * 2
    return Marked(data, marks)


def _scalar(node: Any) -> Any:
    """ruamel.yaml's scalar subclasses (quoted strings, scalar floats) as plain values."""
    if isinstance(node, bool) or node is None:
        return node
    for kind in (int, float, str):
        if isinstance(node, kind):
            return kind(node)
    return node
