"""One scheduler in front of the engine: a bounded queue, one worker thread, shared passes.

    job = scheduler.submit(requests, deadline)     # Overloaded (529) when the queue is full
    outcome = await asyncio.wrap_future(job)        # Outcome: results in the order given

The worker thread is the only caller of the engine. Each round it takes the oldest waiting job,
then as many more as fit under the token budget, and answers all their requests in one
`answer_batch` call, which packs their question rows into shared passes. So concurrent requests
share passes, and throughput grows with load. A job whose deadline passed while it waited is
dropped without running (its caller has already answered 504).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from sr_control.systemone import DeadlineExceeded
from sr_runtime.server.errors import Overloaded, Unavailable
from sr_runtime.types import DecisionEngine, DecisionRequest, Result, coded_options, render_text

CHARS_PER_TOKEN = 4  # for the budget of a round only; the engine packs passes by real tokens


@dataclass(frozen=True, slots=True)
class Outcome:
    results: list[Result]
    queue_s: float  # from submit to the start of its round
    inference_s: float  # its round's answer_batch call
    round_requests: int  # requests answered in that call, this job's and others'


@dataclass(eq=False)
class Job:
    requests: Sequence[DecisionRequest]
    tokens: int
    deadline: float | None  # time.monotonic() seconds
    future: Future[Outcome] = field(default_factory=Future)
    submitted: float = field(default_factory=time.monotonic)


def estimate_tokens(request: DecisionRequest) -> int:
    """Roughly what a request costs the engine: its state once plus each question block."""
    chars = len(render_text(request.state))
    for q in request.questions:
        chars += len(render_text(q.instructions or "")) + sum(len(o.label) for o in coded_options(q))
    return chars // CHARS_PER_TOKEN + 1


class Scheduler:
    def __init__(
        self,
        engine: DecisionEngine,
        max_batch_tokens: int,
        max_queue: int,
        on_round: Callable[[int, int, float], None] | None = None,  # requests, questions, seconds
        before_round: Callable[[int], None] | None = None,  # questions; in the worker thread
    ) -> None:
        self.engine = engine
        self.max_batch_tokens = max_batch_tokens
        self.max_queue = max_queue
        self.on_round = on_round
        self.before_round = before_round
        self._waiting: deque[Job] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="vllm-srun-engine", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        return len(self._waiting)

    def submit(self, requests: Sequence[DecisionRequest], deadline: float | None = None) -> Future[Outcome]:
        job = Job(requests, sum(estimate_tokens(r) for r in requests), deadline)
        with self._cond:
            if self._closed:
                raise Unavailable("the server is shutting down", reason="shutting_down")
            if len(self._waiting) >= self.max_queue:
                raise Overloaded(len(self._waiting))
            self._waiting.append(job)
            self._cond.notify()
        return job.future

    def close(self) -> None:
        """Stop taking jobs, fail the waiting ones, and let the current round finish."""
        with self._cond:
            self._closed = True
            while self._waiting:
                job = self._waiting.popleft()
                if job.future.set_running_or_notify_cancel():
                    job.future.set_exception(Unavailable("the server is shutting down", reason="shutting_down"))
            self._cond.notify()
        self._thread.join()

    # -- the worker ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                jobs = self._take()
            if jobs:
                self._answer(jobs)

    def _take(self) -> list[Job]:
        """The oldest waiting job, then the next ones while they fit the token budget."""
        now = time.monotonic()
        taken: list[Job] = []
        tokens = 0
        while self._waiting:
            job = self._waiting[0]
            if taken and tokens + job.tokens > self.max_batch_tokens:
                break
            self._waiting.popleft()
            if not job.future.set_running_or_notify_cancel():
                continue  # its caller gave up (a deadline, a closed connection)
            if job.deadline is not None and job.deadline <= now:
                job.future.set_exception(DeadlineExceeded("options.deadline_ms passed before the model could start", reason="deadline_exceeded"))
                continue
            taken.append(job)
            tokens += job.tokens
        return taken

    def _answer(self, jobs: list[Job]) -> None:
        requests = [r for job in jobs for r in job.requests]
        questions = sum(len(r.questions) for r in requests)
        if self.before_round is not None:
            self.before_round(questions)
        started = time.monotonic()
        try:
            results = self.engine.answer_batch(requests)
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who maps it to an answer
            if len(jobs) > 1:  # one request's failure must not fail the others of its round
                for job in jobs:
                    self._answer([job])
            else:
                jobs[0].future.set_exception(exc)
            return
        elapsed = time.monotonic() - started
        if self.on_round is not None:
            self.on_round(len(requests), questions, elapsed)
        at = 0
        for job in jobs:
            n = len(job.requests)
            job.future.set_result(Outcome(results[at : at + n], started - job.submitted, elapsed, len(requests)))
            at += n
