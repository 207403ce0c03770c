"""N worker processes of one server under this process: start them, hear from them, stop them.

``vllm-sr extproc serve --workers N`` and ``vllm-srun serve --workers N`` both run this way; each
says what a worker does (``target``) and what its reports mean, and this module does the rest:

- Workers are spawned, not forked: each starts from a clean interpreter, with none of this
  process's threads, event loop or loaded model copied half-alive into it.
- ``PROMETHEUS_MULTIPROC_DIR`` is set before they start (prometheus_client reads it when it is
  imported), so their metrics land in files any one process can add up; a folder of our own,
  removed at the end, unless the caller's environment names one.
- A worker logs as this process does, and ignores SIGINT: Ctrl-C at a terminal reaches the whole
  process group, and this process decides when workers stop.
- A worker says how it stands through ``report(status)``: a JSON file it replaces whole, which
  this process reads whenever it is asked (``reports()``), with no pipe a stopped reader could
  fill up under a worker's event loop.
- SIGTERM or SIGINT here, or ``stopping.set()``, stops them all; so does a worker that exits on
  its own (``watch()`` returns the exit codes, and the server exits 1). A stop is SIGTERM to
  each worker (each drains as a single server does), then SIGKILL after ``stop_s``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from sr_base import log

METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"


class Report:
    """A worker's side of its reports: the latest one replaces the one before."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, status: Mapping[str, Any]) -> None:
        tmp = self.path + ".tmp"
        Path(tmp).write_text(json.dumps({**status, "at": time.time()}))
        os.replace(tmp, self.path)  # a reader sees the last report or this one, never half of one


# What a worker runs: target(index, report, *args), at the top level of a module (spawn pickles it).
Target = Callable[..., None]


def _worker(target: Target, index: int, report: Report, args: tuple[Any, ...], logging: tuple[str, str]) -> None:
    log.configure(*logging)  # type: ignore[arg-type]  # the supervisor's own, already accepted there
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    target(index, report, *args)


class Workers:
    """``count`` processes running ``target(index, report, *args)``, from ``with`` to its end."""

    def __init__(
        self,
        count: int,
        target: Target,
        *args: Any,
        name: str,
        stop_s: float,
        logging: tuple[str, str] = ("info", "console"),
    ) -> None:
        self.stop_s = stop_s
        self.stopping = threading.Event()
        self._reports_dir = tempfile.mkdtemp(prefix=f"{name}-reports-")
        self._files = [os.path.join(self._reports_dir, f"worker-{i}.json") for i in range(count)]
        context = multiprocessing.get_context("spawn")
        self.processes = [
            context.Process(target=_worker, args=(target, i, Report(f), args, logging), name=f"{name}-{i}")
            for i, f in enumerate(self._files)
        ]
        self._own_metrics_dir = METRICS_DIR not in os.environ
        self._previous_handlers: dict[int, Any] = {}

    def __enter__(self) -> Workers:
        if self._own_metrics_dir:
            os.environ[METRICS_DIR] = tempfile.mkdtemp(prefix="vsr-metrics-")
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGINT):
                self._previous_handlers[s] = signal.signal(s, lambda *_: self.stopping.set())
        try:
            for process in self.processes:
                process.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        try:
            self._stop()
        finally:
            for s, handler in self._previous_handlers.items():
                signal.signal(s, handler)
            shutil.rmtree(self._reports_dir, ignore_errors=True)
            if self._own_metrics_dir:
                shutil.rmtree(os.environ.pop(METRICS_DIR), ignore_errors=True)

    @property
    def metrics_dir(self) -> str:
        return os.environ[METRICS_DIR]

    def reports(self) -> list[dict[str, Any] | None]:
        """Each worker's latest report (with ``at``, when it was written); None before its first."""
        found: list[dict[str, Any] | None] = []
        for path in self._files:
            try:
                found.append(json.loads(Path(path).read_text()))
            except (OSError, ValueError):
                found.append(None)
        return found

    def all_alive(self) -> bool:
        return all(p.is_alive() for p in self.processes)

    def exited(self) -> list[multiprocessing.process.BaseProcess]:
        return [p for p in self.processes if not p.is_alive()]

    def exit_codes(self) -> list[int | None]:
        return [p.exitcode for p in self.processes]

    def watch(self, every_s: float = 0.2) -> list[int | None] | None:
        """Until a stop (None) or until a worker exits (every worker's exit code so far)."""
        while not self.stopping.wait(every_s):
            if not self.all_alive():
                return self.exit_codes()
        return None

    def _stop(self) -> None:
        from prometheus_client import multiprocess

        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)  # each drains as a single server does
        for process in self.processes:
            if process.pid is None:
                continue  # never started
            process.join(self.stop_s)
            if process.is_alive():
                process.kill()
                process.join()
            # The gauges of a process that is gone leave the sum (prometheus_client's multiprocess mode).
            multiprocess.mark_process_dead(process.pid, self.metrics_dir)


__all__ = ["METRICS_DIR", "Report", "Workers"]
