"""One scheduler in front of the engine: a bounded queue, one worker thread, shared rounds.

    job = scheduler.submit(requests, deadline)     # Overloaded (529) when the queue is full
    outcome = await asyncio.wrap_future(job)        # Outcome: results in the order given
    scheduler.abandon(job, "client_closed")        # its caller gave up: its remaining work is dropped

The worker thread is the only caller of the engine. Each round it answers, in one
`answer_batch` call, requests from several jobs; the engine packs their question rows into
shared passes, so concurrent requests share passes and throughput grows with load.

No job holds the others for its whole duration. A job of several requests (a batch of 200
states) is answered a slice at a time: a slice is what the engine does in about `SLICE_S`
(from the seconds per token of its past rounds), at least one request. Jobs are served in
order of the rounds they already had, then of arrival: a request that just arrived joins the
next round, ahead of the slices of a batch that has had many, and a batch's slice only fills
what such newcomers leave of a slice's time (but a batch left out of one round has a request in
the next, so newcomers slow it down, never stop it). Every round stays within
`--max-batch-tokens`.

Work ends when nobody waits for it: before each round, a job whose deadline passed fails with
504 `deadline_exceeded` and a job its caller abandoned (the client went away, or the caller
answered 504 itself) is dropped; the requests of either that never ran are counted in
``on_dropped`` (`vsr_runtime_dropped_requests`). A round already in the engine is one slice
long; an engine that checks between its passes (`stops_between_passes`: the checkpoint engine)
gives it up at the next pass once every job in it was dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from sr_runtime.errors import Stopped
from sr_runtime.server.errors import Overloaded, Unavailable
from sr_runtime.types import DecisionEngine, DecisionRequest, Result, coded_options, render_text
from systemone import DeadlineExceeded

CHARS_PER_TOKEN = 4  # for the budget of a round only; the engine packs passes by real tokens
# How long one slice of a split job keeps the engine: a request arriving while a batch runs
# waits at most about this (plus one request of the batch, the least a slice holds) before its
# own round. Short enough to keep a one-question request's wait within a small multiple of its
# own time; long enough that a tiny model still packs many rows in a slice.
SLICE_S = 0.05
_RATE_WEIGHT = 0.3  # of the newest round in the running seconds-per-token estimate


@dataclass(frozen=True, slots=True)
class Outcome:
    results: list[Result]
    queue_s: float  # from submit to the start of its first round
    inference_s: float  # the engine calls of its rounds, summed
    round_requests: int  # the most requests answered in one of its rounds, this job's and others'


@dataclass(eq=False)
class Job:
    requests: Sequence[DecisionRequest]
    sizes: list[int]  # estimate_tokens of each request
    deadline: float | None  # time.monotonic() seconds
    future: Future[Outcome] = field(default_factory=Future)
    submitted: float = field(default_factory=time.monotonic)
    taken: int = 0  # requests[:taken] are answered or in the engine now
    results: list[Result] = field(default_factory=list)
    rounds: int = 0  # rounds it was part of
    started: float | None = None
    inference_s: float = 0.0
    round_requests: int = 0
    gone: str | None = None  # why its caller stopped waiting, once it did
    passed_over: bool = False  # it had no slice in the last round


@dataclass(frozen=True, slots=True)
class Slice:
    job: Job
    start: int
    end: int


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
        on_dropped: Callable[[str, int], None] | None = None,  # why, requests never run
    ) -> None:
        self.engine = engine
        self.max_batch_tokens = max_batch_tokens
        self.max_queue = max_queue
        self.on_round = on_round
        self.before_round = before_round
        self.on_dropped = on_dropped
        self._waiting: list[Job] = []  # jobs with requests not yet taken, in arrival order
        self._jobs: dict[Future[Outcome], Job] = {}  # every job not yet finished, by its future
        self._token_s: float | None = None  # the engine's seconds per estimated token, as measured
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="vllm-srun-engine", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Jobs waiting for (more of) the engine's time."""
        return len(self._waiting)

    def submit(self, requests: Sequence[DecisionRequest], deadline: float | None = None) -> Future[Outcome]:
        job = Job(requests, [estimate_tokens(r) for r in requests], deadline)
        with self._cond:
            if self._closed:
                raise Unavailable("the server is shutting down", reason="shutting_down")
            if len(self._waiting) >= self.max_queue:
                raise Overloaded(len(self._waiting))
            self._waiting.append(job)
            self._jobs[job.future] = job
            self._cond.notify()
        return job.future

    def abandon(self, future: Future[Outcome], why: str) -> None:
        """Its caller answered without it (``why``: deadline, client_closed): drop what has not run."""
        with self._cond:
            job = self._jobs.get(future)
            if job is not None and job.gone is None:
                job.gone = why
                self._drop(job)

    def close(self) -> None:
        """Stop taking jobs, fail the waiting ones, and let the current round finish."""
        with self._cond:
            self._closed = True
            for job in list(self._waiting):
                self._drop(job, "shutting_down")
                _fail(job, Unavailable("the server is shutting down", reason="shutting_down"))
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
                round_ = self._take()
            if round_:
                self._answer(round_)

    def _drop(self, job: Job, why: str | None = None) -> None:
        """Take ``job`` out of the queue (under the lock), counting its requests that never ran."""
        if job in self._waiting:
            self._waiting.remove(job)
        self._jobs.pop(job.future, None)
        left = len(job.requests) - job.taken
        job.taken = len(job.requests)
        if left and self.on_dropped is not None:
            self.on_dropped(why or job.gone or "abandoned", left)

    def _slice_tokens(self) -> int:
        """The tokens a split job may add to a round: about SLICE_S of the engine's time (0 before
        a round was measured: one request, the least a slice takes)."""
        return 0 if not self._token_s else int(SLICE_S / self._token_s)

    def _take(self) -> list[Slice]:
        """This round's slices: jobs by rounds had, then arrival; all within the token budget."""
        now = time.monotonic()
        for job in list(self._waiting):
            if job.deadline is not None and job.deadline <= now:
                self._drop(job, "deadline")
                _fail(
                    job,
                    DeadlineExceeded(
                        "options.deadline_ms passed before the model finished", reason="deadline_exceeded"
                    ),
                )
            elif not job.future.running() and not job.future.set_running_or_notify_cancel():
                self._drop(job, "client_closed")  # its caller cancelled before it ran
        taken: list[Slice] = []
        tokens = 0
        share = self._slice_tokens()
        for job in sorted(self._waiting, key=lambda j: (j.rounds, j.submitted)):
            start = end = job.taken
            split = len(job.requests) > 1
            while end < len(job.requests):
                size = job.sizes[end]
                if tokens and tokens + size > self.max_batch_tokens:
                    break
                if tokens and split and tokens + size > share and (end > start or not job.passed_over):
                    break  # a split job's slice fills only what is left of a slice's time
                tokens += size
                end += 1
            if end > start:
                taken.append(Slice(job, start, end))
                job.taken = end
                if end == len(job.requests):
                    self._waiting.remove(job)
            if tokens >= self.max_batch_tokens:
                break
            if end < len(job.requests) and not split:
                break  # a request that does not fit waits, and none after it overtakes it
        # A split job left out of this round takes one request in the next whatever came since,
        # so a stream of new requests slows a batch down to every other round, never stops it.
        served = {id(s.job) for s in taken}
        for job in self._waiting:
            job.passed_over = id(job) not in served
        return taken

    def _answer(self, round_: list[Slice]) -> None:
        requests = [r for s in round_ for r in s.job.requests[s.start : s.end]]
        questions = sum(len(r.questions) for r in requests)
        if self.before_round is not None:
            self.before_round(questions)
        started = time.monotonic()
        try:
            if getattr(self.engine, "stops_between_passes", False):
                # not in the DecisionEngine protocol: only engines that declare it take ``stop``
                results = self.engine.answer_batch(requests, stop=lambda: _nobody_waits(round_))  # type: ignore[call-arg]
            else:
                results = self.engine.answer_batch(requests)
        except Stopped:
            with self._cond:
                for s in round_:
                    self._drop(s.job, "deadline" if s.job.gone is None else None)
                    if self.on_dropped is not None:  # the slice in the engine never finished either
                        self.on_dropped(s.job.gone or "deadline", s.end - s.start)
                    _fail(
                        s.job,
                        DeadlineExceeded(
                            "options.deadline_ms passed before the model finished", reason="deadline_exceeded"
                        ),
                    )
            return
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who maps it to an answer
            if len(round_) > 1:  # one request's failure must not fail the others of its round
                for s in round_:
                    self._answer([s])
            else:
                with self._cond:
                    self._drop(round_[0].job, "failed")
                _fail(round_[0].job, exc)
            return
        elapsed = time.monotonic() - started
        tokens = sum(sum(s.job.sizes[s.start : s.end]) for s in round_)
        rate = elapsed / max(1, tokens)
        self._token_s = rate if self._token_s is None else (1 - _RATE_WEIGHT) * self._token_s + _RATE_WEIGHT * rate
        if self.on_round is not None:
            self.on_round(len(requests), questions, elapsed)
        at = 0
        with self._cond:
            for s in round_:
                job, n = s.job, s.end - s.start
                job.results += results[at : at + n]
                at += n
                job.rounds += 1
                job.started = started if job.started is None else job.started
                job.inference_s += elapsed
                job.round_requests = max(job.round_requests, len(requests))
                if job.gone is None and len(job.results) == len(job.requests):
                    self._jobs.pop(job.future, None)
                    if not job.future.done():
                        job.future.set_result(
                            Outcome(job.results, job.started - job.submitted, job.inference_s, job.round_requests)
                        )


def _nobody_waits(round_: list[Slice]) -> bool:
    """Every job of the round was abandoned or is past its deadline (read without the lock: a
    job's ``gone`` is set once, and a stale read only delays the stop by a pass)."""
    now = time.monotonic()
    return all(s.job.gone is not None or (s.job.deadline is not None and s.job.deadline <= now) for s in round_)


def _fail(job: Job, exc: BaseException) -> None:
    if not job.future.done():
        if job.future.running() or job.future.set_running_or_notify_cancel():
            job.future.set_exception(exc)
