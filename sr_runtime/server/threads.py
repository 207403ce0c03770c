"""How many threads the model's math gets on CPU, round by round.

The engine thread shares the machine with the event loop (HTTP, codec, replies). A light round
(a request or two, under `HEAVY_ROUND` questions) is a string of small operations that a second
math thread only slows, and the event loop has work of its own meanwhile: such a round leaves the
loop a core. A heavy round (many requests packed together, which is what load brings) has
operations large enough to split, so it takes every core. Measured on 2 cores
(docs/runtime/server.md): one thread for light rounds and two for heavy ones answered 508-527
req/s at 32 clients against 415-426 with one thread always, and the same at one client.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sr_runtime.server.settings import ServerSettings

HEAVY_ROUND = 16  # questions in a round from which it takes every core


@dataclass(frozen=True, slots=True)
class MathThreads:
    light: int  # threads for a round under HEAVY_ROUND questions
    heavy: int  # and from HEAVY_ROUND on

    def for_round(self, questions: int) -> int:
        return self.heavy if questions >= HEAVY_ROUND else self.light


def math_threads(settings: ServerSettings) -> MathThreads | None:
    """The math threads of each kind of round, or None to leave torch's own choice (a GPU, or
    OMP_NUM_THREADS set by the operator). `--threads N` sets both to N; with `--workers N` each
    worker gets its share of the cores for every round."""
    if settings.threads is not None:
        return MathThreads(settings.threads, settings.threads)
    if not settings.device.startswith("cpu") or "OMP_NUM_THREADS" in os.environ:
        return None
    cores = len(os.sched_getaffinity(0))
    if settings.workers > 1:  # the cores split between the worker processes (workers.py)
        each = max(1, cores // settings.workers)
        return MathThreads(each, each)
    return MathThreads(max(1, cores - 1), cores)


class RoundThreads:
    """Called by the scheduler's worker before each round: sets torch's threads for its size."""

    def __init__(self, threads: MathThreads) -> None:
        self.threads = threads
        self.current = 0

    def __call__(self, questions: int) -> None:
        n = self.threads.for_round(questions)
        if n != self.current:
            import torch  # here: tests of the scheduler with a fake engine never load it

            torch.set_num_threads(n)
            self.current = n
