"""``vllm-sr config migrate``: a file rewritten in the current format, checked before and after.

The steps themselves (``sr_control/migrations/``, one module per format change) and the round-trip YAML they
edit are in ``source.py``; reading any format for validation is ``load.py``'s pipeline, which
this module uses on both the input and the result, so a migration never writes a file that
would not load.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sr_control.config.errors import ConfigError, Problem
from sr_control.config.load import validate_text
from sr_control.config.marked import YamlSyntaxError
from sr_control.config.model import CURRENT_VERSION
from sr_control.config.source import dump, file_version, parse, steps, upgrade


@dataclass
class Migration:
    file: str
    from_version: int
    to_version: int
    text: str  # the migrated file; the input itself when nothing was due
    notes: list[str] = field(default_factory=list)

    @property
    def due(self) -> bool:
        return self.from_version < self.to_version


class MigrationRefused(Exception):
    """The file cannot be migrated by this version of vllm-sr (newer format, bad version)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(str(problem))


def migrate_text(text: str, file: str) -> Migration:
    """Migrate ``text``; raises ConfigError when the result would not validate."""
    try:
        doc = parse(text, file)
    except YamlSyntaxError as exc:
        raise ConfigError([exc.problem]) from None
    version = file_version(doc)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1 or version > CURRENT_VERSION:
        report = validate_text(text, file)  # words the refusal exactly as validate does
        raise MigrationRefused(report.errors[0])

    # Validate first, against the input's own lines: a migration never writes a broken file.
    report = validate_text(text, file)
    if not report.valid:
        raise ConfigError(report.errors)
    if version == CURRENT_VERSION:
        return Migration(file, version, version, text)

    notes: list[str] = []
    upgrade(doc, version, notes)
    out = dump(doc, indent=guess_indent(text))
    check = validate_text(out, file)
    if not check.valid:  # a bug in a step, never the user's fault
        raise RuntimeError(f"migration of {file} produced an invalid config:\n" + "\n".join(map(str, check.errors)))
    return Migration(file, version, CURRENT_VERSION, out, notes)


def guess_indent(text: str) -> tuple[int, int, int]:
    """(mapping, sequence, offset) indentation as the file uses it, so untouched lines keep it.

    In ruamel's terms, relative to the parent key: ``offset`` is where a list item's dash
    sits, ``sequence`` where its content starts, ``mapping`` the step of a nested mapping. Each
    is read from the lines that follow a ``key:`` opening a block; the most common value wins.
    """
    mapping: Counter[int] = Counter()
    sequence: Counter[tuple[int, int]] = Counter()
    content = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for line, nxt in zip(content, content[1:]):
        if not line.split(" #")[0].rstrip().endswith(":"):
            continue
        base = _content_column(line)
        lead = len(nxt) - len(nxt.lstrip())
        if nxt.lstrip().startswith("-"):
            if lead >= base:
                sequence[(lead - base, _content_column(nxt) - base)] += 1
        elif lead > base:
            mapping[lead - base] += 1
    m = mapping.most_common(1)[0][0] if mapping else 2
    offset, seq = sequence.most_common(1)[0][0] if sequence else (0, 2)
    return m, seq, offset


def _content_column(line: str) -> int:
    """Where a line's content starts, after its indentation and any list dashes."""
    col = len(line) - len(line.lstrip())
    while line[col:].startswith("-") and line[col + 1 : col + 2] in (" ", ""):
        col += 1
        col += len(line[col:]) - len(line[col:].lstrip())
    return col


def write_atomic(path: str | Path, text: str) -> None:
    """Replace ``path`` only once the new text is fully on disk, keeping its permissions."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = ["Migration", "MigrationRefused", "guess_indent", "migrate_text", "steps", "upgrade", "write_atomic"]
