"""Noticing config edits: woken by the kernel (inotify, FSEvents, through ``watchfiles``), decided by the file.

Editors write a new file and rename it over the old one; Kubernetes updates a mounted ConfigMap
by swapping the ``..data`` symlink to a new directory. Both change what the path resolves to,
so the fingerprint is (resolved path, device, inode, mtime, size), taken through symlinks.

The watch does not poll. ``watchfiles`` watches the directories the path goes through (the
path's own, where a rename or the ``..data`` swap lands, and the resolved file's, where an
in-place write lands) and wakes the loop within a few milliseconds of a change there; the loop
then fingerprints the path. What the events say is only "look now": the fingerprint decides, so
an event about another file of the directory costs one ``stat``. The directories are watched
again whenever the path resolves somewhere new (after a ``..data`` swap). A slow re-check
(``interval``, 5 s by default) covers what the kernel never reports (a network file system).

When to read a change depends on how it was made:

- **Replaced** (the path now names another file: a rename, a symlink swap): the new file was
  complete before it appeared, so it is read at once.
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

import watchfiles

from sr_base import log

Fingerprint = tuple[str, int, int, int, int] | None
_log = log.get_logger("vllm_sr.xds")
# watchfiles hands over a batch of changes once none came for a step: a step of 5 ms sees an
# edit within 5-10 ms (its default, 50 ms, was most of an edit's time to go live).
_STEP_MS = 5
# The longest a burst of changes is gathered before it is handed over.
_DEBOUNCE_MS = 50
RECHECK_S = 5.0


def fingerprint(path: Path) -> Fingerprint:
    try:
        st = os.stat(path)  # follows every symlink, ConfigMap's ..data included
    except OSError:
        return None
    return (os.path.realpath(path), st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def watched_dirs(path: Path) -> tuple[str, ...]:
    """The directories a change of what ``path`` reads can happen in: its own, each symlink's
    target's on the way, and the resolved file's. Those that exist, in order, once each."""
    dirs = [os.path.dirname(os.path.abspath(path))]
    at = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed is 40
        if not os.path.islink(at):
            break
        at = os.path.join(os.path.dirname(at), os.readlink(at))
        dirs.append(os.path.dirname(os.path.normpath(at)))
    dirs.append(os.path.dirname(os.path.realpath(path)))
    return tuple(d for d in dict.fromkeys(dirs) if os.path.isdir(d))


class _Events:
    """A thread that sets ``woken`` whenever anything changes in ``dirs``; stopped by ``stop``."""

    def __init__(self, dirs: tuple[str, ...], woken: threading.Event) -> None:
        self.dirs = dirs
        self._woken = woken
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="config-watch-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if not self.dirs:
            return
        try:
            for _ in watchfiles.watch(
                *self.dirs,
                watch_filter=None,  # every name: the ..data swap, editors' temporary files
                step=_STEP_MS,
                debounce=_DEBOUNCE_MS,
                stop_event=self._stop,
                recursive=False,
                raise_interrupt=False,
            ):
                self._woken.set()
        except Exception:  # noqa: BLE001 - a watched directory removed: the next re-check watches again
            _log.warning("config watch events stopped", dirs=list(self.dirs), exception=traceback.format_exc())

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class FileWatch:
    def __init__(
        self, path: Path, on_change: Callable[[], object], interval: float = RECHECK_S, settle: float = 0.25
    ) -> None:
        """``interval``: seconds between re-checks that no event prompted (a safety net, not the way edits are seen)."""
        self.path = path
        self.on_change = on_change
        self.interval = interval
        self.settle = settle
        self._stop = threading.Event()
        self._woken = threading.Event()
        self._events: _Events | None = None
        self._seen: Fingerprint = None
        self._thread = threading.Thread(target=self._run, name="config-watch", daemon=True)

    def start(self) -> None:
        # Watch and fingerprint now, not in the thread: an edit made right after start() must count.
        self._events = _Events(watched_dirs(self.path), self._woken)
        self._seen = fingerprint(self.path)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._woken.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._events is not None:
            self._events.stop()

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
        while True:
            wait = self.interval
            if written_at is not None:
                wait = min(wait, max(0.0, written_at + self.settle - time.monotonic()))
            self._woken.wait(wait)
            if self._stop.is_set():
                return
            self._woken.clear()  # before looking: a change after this wakes the next turn
            try:
                now = fingerprint(self.path)
                if now != seen:
                    was, seen = seen, now
                    self._rewatch()
                    if replaced(was, now):
                        written_at = None
                        self.on_change()
                    else:
                        written_at = time.monotonic()
                elif written_at is not None and time.monotonic() - written_at >= self.settle:
                    written_at = None
                    self.on_change()
                elif self._events is not None and not self._events.alive():
                    self._rewatch(always=True)
            except Exception:  # noqa: BLE001 - one bad reload must not end every later one
                _log.error("config watch error", file=str(self.path), exception=traceback.format_exc())

    def _rewatch(self, always: bool = False) -> None:
        """Watch the directories the path goes through now, if they moved (a ..data swap)."""
        dirs = watched_dirs(self.path)
        if self._events is not None and (always or dirs != self._events.dirs):
            self._events.stop()
            self._events = _Events(dirs, self._woken)


def replaced(was: Fingerprint, now: Fingerprint) -> bool:
    """Whether the path now names another, whole file (a rename or a symlink swap), not one being written."""
    return was is not None and now is not None and was[:3] != now[:3]
