"""Noticing config edits by polling: dependency-free, and correct for how files really change.

Editors write a new file and rename it over the old one; Kubernetes updates a mounted ConfigMap
by swapping the ``..data`` symlink to a new directory. Both change what the path resolves to,
so the fingerprint is (resolved path, device, inode, mtime, size), taken through symlinks. A
change is acted on once the fingerprint has held still for one poll, so a file caught
half-written is not read.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

Fingerprint = tuple[str, int, int, int, int] | None


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

    def _run(self) -> None:
        seen = self._seen
        settling = False
        while not self._stop.wait(self.interval):
            now = fingerprint(self.path)
            if now != seen:
                seen, settling = now, True
            elif settling:
                settling = False
                self.on_change()
