"""A fast YAML reader that remembers where every value came from.

Validation reads every config on every reload (``xds serve`` reads the file each time it
changes), so it uses libyaml through PyYAML's C loader: about 7x faster than ruamel.yaml's
round-trip loader, which ``config migrate`` and older formats go through (``source.py``). The
two must read a value alike, or the same file would mean two things by its version; so this
reader takes its scalar rules from ruamel.yaml itself rather than restating them: ruamel's YAML
1.2 rows of its implicit-resolver table decide what a plain scalar is, and ruamel's own
constructors build it (``1_000`` and ``0b11`` are ints, ``2001-12-14`` a date, ``no`` and
``on`` strings). A scalar of a type it cannot build (``0x_``, ``2001-13-45``) and a
``%YAML`` directive other than 1.2 are refused by both readers, at their place. A key given
twice is an error, not a silent override. ``tests/config/test_marked.py`` holds the two equal
on generated scalars and documents.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import yaml
from ruamel.yaml import resolver as ruamel_resolver
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.constructor import SafeConstructor as RuamelSafeConstructor
from ruamel.yaml.error import YAMLError as RuamelYAMLError
from ruamel.yaml.scalarbool import ScalarBoolean

from sr_control.config.errors import Loc, Problem

# (key line, key column, value line, value column), 0-based; a list item's key is its dash.
Mark = tuple[int, int, int, int]
# Where a value sits in the YAML as written: its mapping keys are any YAML scalar, not only the
# str and int of a Loc (what pydantic reports, and what ``position`` looks up).
YamlPath = tuple[str | int | float | bool | datetime.date | None, ...]


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


YAML_VERSION = (1, 2)


class _CoreLoader(yaml.CSafeLoader):
    """libyaml's parser; plain scalars resolved and built as ruamel.yaml's 1.2 loader does."""


# ruamel.yaml's own table, its 1.2 rows in its order: a plain scalar takes the first row its
# first character and pattern match, as in ruamel's resolver. The ``yaml`` row is there for
# documentation only (a plain scalar cannot start with ``!``, ``&`` or ``*``).
_CoreLoader.yaml_implicit_resolvers = {}
for _versions, _tag, _pattern, _first in ruamel_resolver.implicit_resolvers:
    if YAML_VERSION in _versions and _tag != "tag:yaml.org,2002:yaml":
        # ruamel compiles its patterns lazily behind a proxy; match through the pattern itself.
        _CoreLoader.add_implicit_resolver(_tag, re.compile(_pattern.pattern, _pattern.flags), _first)


class _RuamelScalars(RuamelSafeConstructor):
    """ruamel.yaml's scalar constructors, run on libyaml's nodes (whose value is their text)."""

    def construct_scalar(self, node: Any) -> Any:
        return node.value


# ruamel's constructors ask their loader's resolver which YAML version they are reading.
_RUAMEL = _RuamelScalars(loader=SimpleNamespace(_resolver=SimpleNamespace(processing_version=YAML_VERSION)))


def unbuildable(text: Any, tag: Any, exc: Exception) -> str:
    """Why a scalar that resolved to a type is not one; both readers say it in these words."""
    kind = str(tag).rpartition(":")[2]
    why = f" ({exc})" if kind == "timestamp" and isinstance(exc, ValueError) else ""
    return f"{text!r} reads as a YAML {kind} but is not a valid one{why}; quote it to keep it a string"


def _by_ruamel(build: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    """A PyYAML constructor that builds a scalar with ruamel's method ``build``. What ruamel
    would raise bare (``int('', 16)`` for ``0x_``, a ValueError for ``2001-13-45``) becomes an
    error at the scalar's place."""

    def construct(loader: Any, node: Any) -> Any:
        try:
            return build(node)
        except (ValueError, LookupError, RuamelYAMLError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, unbuildable(node.value, node.tag, exc), node.start_mark
            ) from None

    return construct


_ruamel_int = _by_ruamel(_RUAMEL.construct_yaml_int)


def _int(loader: Any, node: Any) -> Any:
    text = node.value
    if text.isdigit():  # most ints in a config: no sign, base or `_`
        return int(text)
    return _ruamel_int(loader, node)


_CoreLoader.add_constructor("tag:yaml.org,2002:int", _int)
_CoreLoader.add_constructor("tag:yaml.org,2002:float", _by_ruamel(_RUAMEL.construct_yaml_float))
_CoreLoader.add_constructor("tag:yaml.org,2002:bool", _by_ruamel(_RUAMEL.construct_yaml_bool))
_CoreLoader.add_constructor("tag:yaml.org,2002:timestamp", _by_ruamel(_RUAMEL.construct_yaml_timestamp))


def _text(loader: Any, node: Any) -> Any:
    return loader.construct_scalar(node)


# A plain ``=`` or ``<<`` where a value goes is text: ruamel resolves them to tags it keeps
# unbuilt (``from_round_trip`` reads those as their text too); ``<<`` as a key still merges.
_CoreLoader.add_constructor("tag:yaml.org,2002:value", _text)
_CoreLoader.add_constructor("tag:yaml.org,2002:merge", _text)

# Tags the two readers would build differently (ruamel.yaml keeps a ``!!set`` as a set and an
# unknown ``!tag`` as a tagged value; PyYAML makes a dict and refuses): no config needs one.
REFUSED_TAGS = ("tag:yaml.org,2002:set", "tag:yaml.org,2002:omap", "tag:yaml.org,2002:pairs", None)


def refused_tag(tag: Any) -> str:
    """Why a node's tag is refused; both readers say it in these words."""
    return f"the tag {str(tag).replace('tag:yaml.org,2002:', '!!')} has no meaning in a config; remove it"


def _refuse(loader: Any, node: Any) -> Any:
    raise yaml.constructor.ConstructorError(None, None, refused_tag(node.tag), node.start_mark)


for _refused in REFUSED_TAGS:
    _CoreLoader.add_constructor(_refused, _refuse)


def check_version(text: str, file: str) -> None:
    """Refuse a ``%YAML`` directive other than 1.2. Under ``%YAML 1.1`` ruamel.yaml reads
    ``yes`` as true and ``010`` as eight, and libyaml cannot: rather than one file meaning two
    things, neither reader takes it. Raises YamlSyntaxError."""
    if "%YAML" not in text:  # rare, so most reads skip the parse below
        return
    try:
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, yaml.DocumentStartEvent) and event.version not in (None, YAML_VERSION):
                version = ".".join(map(str, event.version))
                message = f"%YAML {version}: vllm-sr reads configs as YAML 1.2 only; remove the directive"
                line, col = (event.start_mark.line, event.start_mark.column) if event.start_mark else (0, 0)
                raise YamlSyntaxError(Problem(file, line + 1, col + 1, (), message))
    except yaml.YAMLError:
        return  # a syntax error: the reader itself reports it, at its place


def read(text: str, file: str) -> Marked:
    """Parse ``text``; an empty file (or one null) is an empty mapping. Raises YamlSyntaxError."""
    check_version(text, file)
    loader = _CoreLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return Marked({}, {(): (0, 0, 0, 0)})
        marked = Marked(None)
        marked.data = _build(loader, root, (), marked.marks, file)
        if marked.data is None:  # a file of only ``~`` or ``null``: empty, as ruamel.yaml reads it
            marked.data = {}
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
        if node.tag != _SEQ:  # ``!!omap``, ``!!pairs``, ``!custom``: see REFUSED_TAGS
            _refuse(loader, node)
        items = []
        for i, child in enumerate(node.value):
            here = loc + (i,)
            marks[here] = (child.start_mark.line, child.start_mark.column) * 2
            items.append(_build(loader, child, here, marks, file))
        return items
    if isinstance(node, yaml.MappingNode):
        if node.tag != _MAP:
            _refuse(loader, node)
        seen: dict[Any, int] = {}
        pairs = node.value
        merges = any(key_node.tag == _MERGE for key_node, _ in pairs)
        if merges:
            pairs = _merged(loader, node, seen)
        out: dict[Any, Any] = {}
        # Key, value, next key: in the order written, so that the first problem reported is the
        # first in the file, as ruamel.yaml finds it.
        for key_node, value_node in pairs:
            key = loader.construct_object(key_node, deep=True) if merges else _key(loader, key_node, seen)
            if not isinstance(key, (str, int, float, bool, datetime.date)) and key is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a scalar", key_node.start_mark
                )
            here = loc + (key,)
            marks[here] = (
                key_node.start_mark.line,
                key_node.start_mark.column,
                value_node.start_mark.line,
                value_node.start_mark.column,
            )
            out[key] = _build(loader, value_node, here, marks, file)
        return out
    raise yaml.constructor.ConstructorError(None, None, f"unexpected YAML node {node.tag}", node.start_mark)


_MERGE, _MAP, _SEQ = "tag:yaml.org,2002:merge", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


def _merged(loader: Any, node: Any, seen: dict[Any, int]) -> list[tuple[Any, Any]]:
    """The (key, value) nodes of a mapping with ``<<`` merge keys, as ruamel.yaml orders them:
    its own keys as written (checked for repeats), then the keys merged in that it lacks."""
    own = [(key_node, value_node) for key_node, value_node in node.value if key_node.tag != _MERGE]
    loader.flatten_mapping(node)  # the merged pairs, then its own; a later pair wins
    for key_node, _ in own:  # after the merge, whose problems ruamel.yaml meets first
        _key(loader, key_node, seen)
    merged: dict[Any, tuple[Any, Any]] = {}
    for key_node, value_node in node.value[: len(node.value) - len(own)]:
        key = loader.construct_object(key_node, deep=True)
        if key not in seen:
            merged[key] = (key_node, value_node)
    return own + list(merged.values())


def _key(loader: Any, key_node: Any, seen: dict[Any, int]) -> Any:
    """The key ``key_node`` holds; an error if it is a collection or was given before."""
    if not isinstance(key_node, yaml.ScalarNode):  # ``? [a, b]``: not a name, and unhashable
        raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a scalar", key_node.start_mark)
    key = loader.construct_object(key_node, deep=True)
    if key in seen:
        raise yaml.constructor.ConstructorError(
            None, None, f"duplicate key {key!r} (first given on line {seen[key] + 1})", key_node.start_mark
        )
    seen[key] = key_node.start_mark.line
    return key


def from_round_trip(doc: Any) -> Marked:
    """A ruamel.yaml round-trip tree (after an in-memory migration) as Marked data."""
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
    """ruamel.yaml's scalar subclasses (quoted strings, scalar floats, anchored booleans,
    timestamps) as the plain values ``read`` gives."""
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, ScalarBoolean):  # an anchored ``true``: an int subclass, not a bool
        return bool(node)
    if isinstance(node, datetime.datetime):  # ruamel's TimeStamp keeps how it was written
        return datetime.datetime(
            node.year, node.month, node.day, node.hour, node.minute, node.second, node.microsecond, node.tzinfo
        )
    if isinstance(node, TaggedScalar) and str(node.tag) in _TEXT_TAGS:
        return str(node.value)
    for kind in (int, float, str):
        if isinstance(node, kind):
            return kind(node)
    return node


# Tags ruamel.yaml leaves on a scalar it keeps as written (a plain ``=`` or ``<<``, an explicit
# ``!!str``); ``read`` makes them text.
_TEXT_TAGS = ("tag:yaml.org,2002:value", "tag:yaml.org,2002:merge", "tag:yaml.org,2002:str")
