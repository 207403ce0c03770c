"""The config as its author wrote it: round-trip YAML, and the steps that bring it up to date.

Reading for validation goes through ``marked.py`` (libyaml, much faster). This module is used
when a file must be written back (``config migrate``) or an older format is read: ruamel.yaml's
round-trip tree keeps comments, key order, quoting and where each value was written, so a
migrated file keeps its author's layout and a problem found after an in-memory migration points
at the author's own line.

Migration steps are one module each in ``sr_control/migrations/`` (docs/config/migration.md),
found as package data so that an installed wheel migrates as a checkout does. A step
module defines ``FROM_VERSION``, ``TO_VERSION`` (= FROM_VERSION + 1), ``SUMMARY`` and
``apply(doc) -> list[str]``, which edits the round-trip tree in place and returns one note per
change. An unversioned file is format 1.
"""

from __future__ import annotations

import importlib
import io
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import ModuleType
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, TaggedScalar
from ruamel.yaml.constructor import ConstructorError, RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import ScalarNode

from sr_control.config.errors import Problem
from sr_control.config.marked import REFUSED_TAGS, YamlSyntaxError, check_version, refused_tag, unbuildable
from sr_control.config.model import CURRENT_VERSION

MIGRATIONS_PACKAGE = "sr_control.migrations"
_STEP_FILE = re.compile(r"^([0-9]{4}_[a-z0-9_]+)\.py$")


class _Constructor(RoundTripConstructor):
    """ruamel.yaml's round-trip constructor, refusing what ``marked.read`` refuses, at its
    place and in its words: a scalar it cannot build (``0x_``, ``2001-13-45``: ruamel raises a
    bare ValueError or IndexError) and the tags no config needs (``!!set``, ``!custom``, a
    collection tagged ``!!str``)."""

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        if not isinstance(node, ScalarNode) and str(node.tag) not in _COLLECTIONS:
            # Refused before ruamel builds it: its builder for an unknown tag is a generator
            # that raises again when it is dropped unfinished (an "unraisable" error).
            raise ConstructorError(None, None, refused_tag(node.tag), node.start_mark)
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, LookupError, ConstructorError) as exc:
            if not isinstance(node, ScalarNode) or str(node.tag) not in _BUILT:
                raise
            raise ConstructorError(None, None, unbuildable(node.value, node.tag, exc), node.start_mark) from None

    def construct_yaml_str(self, node: Any) -> Any:
        if node.ctag.handle:  # an explicit ``!!str``: ruamel would build it with that generator
            return _tagged(node)
        return super().construct_yaml_str(node)

    def refuse_tag(self, node: Any) -> Any:
        if isinstance(node, ScalarNode) and str(node.tag) in _TEXT_TAGS:
            # A plain ``=`` or ``<<`` value, kept as ruamel keeps it (built here, not by its
            # generator: see above).
            return _tagged(node)
        raise ConstructorError(None, None, refused_tag(node.tag), node.start_mark)


def _tagged(node: Any) -> TaggedScalar:
    """A scalar kept with its tag as written, as ruamel's ``construct_unknown`` keeps it."""
    scalar = TaggedScalar(node.value, node.style)
    scalar.yaml_set_ctag(node.ctag)
    return scalar


# The scalars ruamel builds from text, whose errors are the text's; and plain ``=`` and ``<<``.
_BUILT = tuple(f"tag:yaml.org,2002:{kind}" for kind in ("int", "float", "bool", "timestamp"))
_TEXT_TAGS = ("tag:yaml.org,2002:value", "tag:yaml.org,2002:merge")
_COLLECTIONS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")
for _refused in REFUSED_TAGS:
    _Constructor.add_constructor(_refused, _Constructor.refuse_tag)
_Constructor.add_constructor("tag:yaml.org,2002:str", _Constructor.construct_yaml_str)


def round_trip_yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.Constructor = _Constructor
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap a user's long lines
    return yaml


def parse(text: str, file: str) -> Any:
    """The round-trip tree of ``text``; an empty file is an empty mapping."""
    check_version(text, file)
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


def dump(doc: Any, *, indent: tuple[int, int, int] | None = None) -> str:
    yaml = round_trip_yaml()
    if indent is not None:
        mapping, sequence, offset = indent
        yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


@dataclass(frozen=True)
class Step:
    from_version: int
    to_version: int
    summary: str
    module: ModuleType

    def apply(self, doc: Any) -> list[str]:
        return list(self.module.apply(doc))


@cache
def steps() -> tuple[Step, ...]:
    """The step chain, checked: consecutive versions from 1 up to the current format."""
    names = sorted(m[1] for f in resources.files(MIGRATIONS_PACKAGE).iterdir() if (m := _STEP_FILE.match(f.name)))
    found = []
    for name in names:
        module = importlib.import_module(f"{MIGRATIONS_PACKAGE}.{name}")
        found.append(Step(module.FROM_VERSION, module.TO_VERSION, module.SUMMARY, module))
    chain = [(s.from_version, s.to_version) for s in found]
    expected = [(v, v + 1) for v in range(1, CURRENT_VERSION)]
    if chain != expected:
        raise RuntimeError(f"migrations in {MIGRATIONS_PACKAGE} form {chain}, expected {expected}")
    return tuple(found)


def file_version(doc: Any) -> int:
    return doc.get("version", 1) if isinstance(doc, dict) else 1


def upgrade(doc: Any, version: int, notes: list[str] | None = None) -> Any:
    """Apply every step from ``version`` to the current format, in place; returns ``doc``."""
    for step in steps():
        if step.from_version >= version:
            for note in step.apply(doc):
                if notes is not None:
                    notes.append(f"{step.from_version} -> {step.to_version}: {note}")
    if version < CURRENT_VERSION:
        if "version" in doc:
            doc["version"] = CURRENT_VERSION
        else:
            doc.insert(0, "version", CURRENT_VERSION)
    return doc


__all__ = ["MIGRATIONS_PACKAGE", "Step", "dump", "file_version", "parse", "round_trip_yaml", "steps", "upgrade"]
