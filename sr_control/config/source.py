"""YAML documents that remember where every value came from.

ruamel.yaml's round-trip loader keeps line/column marks on mappings and sequences, and keeps
comments, key order and quoting for ``config migrate``. The same tree serves both jobs.
"""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from sr_control.config.errors import Loc, Problem


def round_trip_yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap a user's long lines
    return yaml


class YamlSyntaxError(Exception):
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(str(problem))


def parse(text: str, file: str) -> Any:
    """The round-trip tree of ``text``; an empty file is an empty mapping."""
    try:
        doc = round_trip_yaml().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        reason = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise YamlSyntaxError(Problem(file, line, col, (), f"invalid YAML: {reason}")) from None
    except YAMLError as exc:
        raise YamlSyntaxError(Problem(file, 1, 1, (), f"invalid YAML: {exc}")) from None
    return CommentedMap() if doc is None else doc


def plain(node: Any) -> Any:
    """The tree as plain dicts, lists and scalars (ruamel's scalar subclasses removed)."""
    if isinstance(node, dict):
        return {plain(k): plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    for kind in (int, float, str):
        if isinstance(node, kind):
            return kind(node)
    return node


def position(doc: Any, loc: Loc, *, at_key: bool = False) -> tuple[int, int]:
    """1-based (line, column) of the value at ``loc``, or of the deepest part that exists.

    A scalar is pointed at where its value starts; a mapping or list at its key (or its dash),
    which is where a reader looks. ``at_key`` always points at the key, for unknown keys.
    """
    best = _mark(doc) or (0, 0)
    node = doc
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, CommentedMap) and part in node:
            child = node[part]
            on_key = (last and at_key) or isinstance(child, (CommentedMap, CommentedSeq))
            mark = _lc(node.lc.key if on_key else node.lc.value, part)
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            child = node[part]
            mark = _lc(node.lc.item, part)
        else:
            break
        best = mark or best
        node = child
    return best[0] + 1, best[1] + 1


def _lc(lookup: Any, part: Any) -> tuple[int, int] | None:
    try:
        line, col = lookup(part)
    except (KeyError, TypeError, IndexError):
        return None
    return None if line is None else (line, col)


def _mark(node: Any) -> tuple[int, int] | None:
    lc = getattr(node, "lc", None)
    if lc is None or getattr(lc, "line", None) is None:
        return None
    return lc.line, lc.col


def dump(doc: Any, *, indent: tuple[int, int, int] | None = None) -> str:
    yaml = round_trip_yaml()
    if indent is not None:
        mapping, sequence, offset = indent
        yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()
