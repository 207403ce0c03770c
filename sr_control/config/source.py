"""The config as its author wrote it: round-trip YAML, and the steps that bring it up to date.

Reading for validation goes through ``marked.py`` (libyaml, much faster). This module is used
when a file must be written back (``config migrate``) or an older format is read: ruamel.yaml's
round-trip tree keeps comments, key order, quoting and where each value was written, so a
migrated file keeps its author's layout and a problem found after an in-memory migration points
at the author's own line.

Migration steps are one file each under ``migrations/`` (docs/config/migration.md). A step
module defines ``FROM_VERSION``, ``TO_VERSION`` (= FROM_VERSION + 1), ``SUMMARY`` and
``apply(doc) -> list[str]``, which edits the round-trip tree in place and returns one note per
change. An unversioned file is format 1.
"""

from __future__ import annotations

import importlib.util
import io
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from sr_control.config.errors import Problem
from sr_control.config.marked import YamlSyntaxError
from sr_control.config.model import CURRENT_VERSION

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def round_trip_yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap a user's long lines
    return yaml


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
    found = []
    for path in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.py")):
        spec = importlib.util.spec_from_file_location(f"sr_migrations.{path.stem}", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found.append(Step(module.FROM_VERSION, module.TO_VERSION, module.SUMMARY, module))
    chain = [(s.from_version, s.to_version) for s in found]
    expected = [(v, v + 1) for v in range(1, CURRENT_VERSION)]
    if chain != expected:
        raise RuntimeError(f"migrations in {MIGRATIONS_DIR} form {chain}, expected {expected}")
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


__all__ = ["MIGRATIONS_DIR", "Step", "dump", "file_version", "parse", "round_trip_yaml", "steps", "upgrade"]
