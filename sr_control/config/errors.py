"""Config problems, each tied to a file position and a field path."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Loc = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def field_path(loc: Loc) -> str:
    """``('listeners', 0, 'apis', 'systemone')`` -> ``listeners[0].apis.systemone``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f'["{part}"]'
    return out or "(file)"


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in one file. ``line`` and ``column`` count from 1."""

    file: str
    line: int
    column: int
    loc: Loc
    message: str
    severity: Literal["error", "warning"] = "error"

    @property
    def path(self) -> str:
        return field_path(self.loc)

    def __str__(self) -> str:
        where = f"{self.path}: " if self.loc else ""
        return f"{self.file}:{self.line}:{self.column}: {self.severity}: {where}{self.message}"

    def as_json(self) -> dict[str, object]:
        return {
            "line": self.line,
            "column": self.column,
            "path": self.path if self.loc else "",
            "message": self.message,
            "severity": self.severity,
        }


class ConfigError(Exception):
    """A config that cannot be used, with every problem found in it."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ConfigUnreadable(Exception):
    """The file could not be read at all (missing, a directory, not UTF-8)."""

    def __init__(self, file: str, reason: str) -> None:
        self.file = file
        self.reason = reason
        super().__init__(f"{file}: error: cannot read: {reason}")
