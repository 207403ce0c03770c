"""The logs of a ``vllm-sr serve`` stack: one file per part under ``STATE_DIR/logs/`` (Envoy's
access log among them), read as one, and a request followed through every part by its id.

    parts(folder)                        # {"envoy": Path(...), "extproc": ..., "runtime": ...}
    tail(path, 50)                       # the last 50 lines
    matching(path, "1b58468a-...")       # the lines that name the request id
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path

# Read from the end in blocks of this size: a log may be large, its tail is what is asked.
_BLOCK = 64 * 1024


def parts(folder: Path) -> dict[str, Path]:
    """Part name -> its log file (``envoy``, ``extproc``, ``runtime``), in name order."""
    return {p.stem: p for p in sorted(folder.glob("*.log")) if p.is_file()}


def tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of ``path``, read from its end."""
    if lines <= 0:
        return []
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        data = b""
        while end > 0 and data.count(b"\n") <= lines:
            start = max(0, end - _BLOCK)
            f.seek(start)
            data = f.read(end - start) + data
            end = start
    return [line.decode("utf-8", "replace") for line in data.splitlines()[-lines:]]


def matching(path: Path, needle: str) -> Iterator[str]:
    """The lines of ``path`` that hold ``needle`` (a request id), in order."""
    with open(path, "rb") as f:
        wanted = needle.encode()
        for line in f:
            if wanted in line:
                yield line.rstrip(b"\n").decode("utf-8", "replace")


def last(path: Path, needle: str, lines: int) -> list[str]:
    """The last ``lines`` lines of ``path`` that hold ``needle``."""
    return list(deque(matching(path, needle), maxlen=lines))


__all__ = ["last", "matching", "parts", "tail"]
