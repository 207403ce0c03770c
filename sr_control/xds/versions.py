"""The versions the control plane served, newest first, each with its source text and time.

Kept under the state directory so that they survive a restart (``versions/index.json`` and one
``<version>.yaml`` per distinct version); without a directory, in memory only. Every serve is an
entry, so a rollback to an earlier text shows up as a new entry on top, with the version that
text compiles to (versions are content hashes: the same text is the same version).

    store = VersionStore(Path(".vllm-sr/versions"), keep=20)
    store.record("1e45d0df984883c4", text, generation=3)
    store.entries()          # [{"version": ..., "at": ..., "generation": ..., "bytes": ...}, ...]
    store.source("1e45...")  # the text, or None when no longer kept
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sr_base import log

_log = log.get_logger("vllm_sr.xds")
KEEP = 20
_INDEX = "index.json"


def _write_atomic(path: Path, data: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class VersionStore:
    def __init__(self, directory: Path | None, keep: int = KEEP) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.directory = directory
        self.keep = keep
        self._lock = threading.Lock()
        self._entries: list[dict[str, Any]] = []  # newest first
        self._texts: dict[str, str] = {}  # in memory when there is no directory
        if directory is not None:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._entries = self._read_index()

    def _read_index(self) -> list[dict[str, Any]]:
        assert self.directory is not None
        try:
            entries = json.loads((self.directory / _INDEX).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            # A damaged index loses the history, not the service: start a new one.
            _log.warning("version index unreadable; starting a new one", file=str(self.directory), error=str(exc))
            return []
        return [e for e in entries if isinstance(e, dict) and isinstance(e.get("version"), str)][: self.keep]

    def record(self, version: str, text: str, generation: int = 0, types: dict[str, str] | None = None) -> None:
        """Note that ``version`` (compiled from ``text``) is now served; ``types`` are its per-type
        versions (what a node ACKs), so that a node's ACKs can be named by config version."""
        with self._lock:
            if self._entries and self._entries[0]["version"] == version:
                return  # the same version served again by this process (nothing changed for Envoy)
            entry = {
                "version": version,
                "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
                "generation": generation,
                "bytes": len(text.encode()),
                "types": dict(types or {}),
            }
            self._entries.insert(0, entry)
            dropped, self._entries = self._entries[self.keep :], self._entries[: self.keep]
            kept = {e["version"] for e in self._entries}
            if self.directory is None:
                self._texts[version] = text
                for e in dropped:
                    if e["version"] not in kept:
                        self._texts.pop(e["version"], None)
                return
            try:
                _write_atomic(self.directory / f"{version}.yaml", text)
                _write_atomic(self.directory / _INDEX, json.dumps(self._entries, indent=1) + "\n")
                for e in dropped:
                    if e["version"] not in kept:
                        (self.directory / f"{e['version']}.yaml").unlink(missing_ok=True)
            except OSError as exc:
                # Serving goes on; only the history is short of this version.
                _log.error("version not kept", version=version, directory=str(self.directory), error=str(exc))

    def entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(e) for e in self._entries]

    def source(self, version: str) -> str | None:
        with self._lock:
            if not any(e["version"] == version for e in self._entries):
                return None
            if self.directory is None:
                return self._texts.get(version)
            try:
                return (self.directory / f"{version}.yaml").read_text(encoding="utf-8")
            except OSError:
                return None


__all__ = ["KEEP", "VersionStore"]
