"""Noticing config edits by polling: dependency-free, and correct for how files really change.

Editors write a new file and rename it over the old one; Kubernetes updates a mounted ConfigMap
by swapping the ``..data`` symlink to a new directory. Both change what the path resolves to,
so the fingerprint is (resolved path, device, inode, mtime, size), taken through symlinks. A
change is acted on once the fingerprint has held still for one poll, so a file caught
half-written is not read.

The loop outlives its callback: an error in a reload is logged with its traceback and the next
change is still acted on. Only a BaseException that is not an Exception (SystemExit) ends it;
``alive()`` then turns false, which the status port's ``/livez`` reports.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

from sr_control import log

Fingerprint = tuple[str, int, int, int, int] | None
_log = log.get_logger("vllm_sr.xds")


def fingerprint(path: Path) -> Fingerprint:
    try:
        st = os.stat(path)  # follows every symlink, ConfigMap's ..data included
    except OSError:
        return None
    return (os.path.realpath(path), st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class FileWatch:
    def __init__(self, path: Path, on_change: Callable[[], object], interval: float = 0.025) -> None:
        self.path = path
        self.on_change = on_change
        self.interval = interval
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
                _log.error("config watch stopped", file=str(self.path), hint="edits are no longer read; restart the control plane")

    def _loop(self) -> None:
        seen = self._seen
        settling = False
        while not self._stop.wait(self.interval):
            try:
                now = fingerprint(self.path)
                if now != seen:
                    seen, settling = now, True
                elif settling:
                    settling = False
                    self.on_change()
            except Exception:  # noqa: BLE001 - one bad reload must not end every later one
                _log.error("config watch error", file=str(self.path), exception=traceback.format_exc())
