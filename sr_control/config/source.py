"""Round-trip YAML for ``config migrate``: comments, key order and quoting survive an edit.

Reading for validation goes through ``marked.py`` (libyaml, much faster); this module is used
only when a file must be written back, or when an old format is migrated in memory.
"""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from sr_control.config.errors import Problem
from sr_control.config.marked import YamlSyntaxError


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
