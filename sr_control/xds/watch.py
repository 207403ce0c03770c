"""Noticing config edits by polling: dependency-free, and correct for how files really change.

Editors write a new file and rename it over the old one; Kubernetes updates a mounted ConfigMap
by swapping the ``..data`` symlink to a new directory. Both change what the path resolves to,
so the fingerprint is (resolved path, device, inode, mtime, size), taken through symlinks.

When to read a change depends on how it was made:

- **Replaced** (the path now names another file: a rename, a symlink swap): the new file was
  complete before it appeared, so it is read at the next poll.
- **Written in place** (same file, new size or mtime), or created where nothing was: the writer
  may not be done, and a half-written YAML can still parse (a list cut after its third listener
  would drop the rest from Envoy). It is read only once it has held still for ``settle`` seconds
  (0.25 s by default). A writer that pauses longer than that mid-file can still be read half
  done; writing a temporary file and renaming it is the safe way, and the fast one.

The loop outlives its callback: an error in a reload is logged with its traceback and the next
change is still acted on. Only a BaseException that is not an Exception (SystemExit) ends it;
``alive()`` then turns false, which the status port's ``/livez`` reports.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from sr_base import log

Fingerprint = tuple[str, int, int, int, int] | None
_log = log.get_logger("vllm_sr.xds")


def fingerprint(path: Path) -> Fingerprint:
    try:
        st = os.stat(path)  # follows every symlink, ConfigMap's ..data included
    except OSError:
        return None
    return (os.path.realpath(path), st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class FileWatch:
    def __init__(
        self, path: Path, on_change: Callable[[], object], interval: float = 0.025, settle: float = 0.25
    ) -> None:
        self.path = path
        self.on_change = on_change
        self.interval = interval
        self.settle = max(settle, interval)
        self._stop = threading.Event()
        self._seen: Fingerprint = None
        self._thread = threading.Thread(target=self._run, name="config-watch", daemon=True)

    def start(self) -> None:
        # Fingerprint now, not in the thread: an edit made right after start() must count.
        self._seen = fingerprint(self.path)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def alive(self) -> bool:
        """Whether changes are still being watched for (false once stopped, or if the loop died)."""
        return self._thread.is_alive() and not self._stop.is_set()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            if not self._stop.is_set():
                _log.error(
                    "config watch stopped",
                    file=str(self.path),
                    hint="edits are no longer read; restart the control plane",
                )

    def _loop(self) -> None:
        seen = self._seen
        written_at: float | None = None  # when an in-place write not yet read was last seen changing
        while not self._stop.wait(self.interval):
            try:
                now = fingerprint(self.path)
                if now != seen:
                    was, seen = seen, now
                    if replaced(was, now):
                        written_at = None
                        self.on_change()
                    else:
                        written_at = time.monotonic()
                elif written_at is not None and time.monotonic() - written_at >= self.settle:
                    written_at = None
                    self.on_change()
            except Exception:  # noqa: BLE001 - one bad reload must not end every later one
                _log.error("config watch error", file=str(self.path), exception=traceback.format_exc())


def replaced(was: Fingerprint, now: Fingerprint) -> bool:
    """Whether the path now names another, whole file (a rename or a symlink swap), not one being written."""
    return was is not None and now is not None and was[:3] != now[:3]
