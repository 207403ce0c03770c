"""One scheduler: requests that arrive together are answered in one engine call, as if alone."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sr_runtime.engine import Engine
from sr_runtime.errors import Stopped
from sr_runtime.server import ServerSettings
from sr_runtime.server.scheduler import Scheduler, estimate_tokens
from sr_runtime.types import ChoiceQuestion, DecisionRequest, NoulQuestion, Result, ScoreQuestion
from systemone import DeadlineExceeded

from .conftest import NOUL, HeldEngine, body, engine_loader, runtime, serving, wait_until

QUESTIONS = (
    NoulQuestion("Does the user report a problem that blocks their work?"),
    ChoiceQuestion((("billing", "Payments"), ("engineering", "Outages and bugs"), ("other", None)), "Which team?"),
    ScoreQuestion(("calm", "annoyed", "furious"), "How angry?"),
)
STATES = [
    "The export crashes with a 500.",
    "I was charged twice this month.",
    "Thanks, all good!",
    "Login fails since the reset.",
]


def numbers(result) -> list[float]:  # type: ignore[no-untyped-def]
    out: list[float] = []
    for a in result.answers:
        out += (
            [a.noul]
            if a.type == "noul"
            else [p for _, p in a.probabilities]
            if a.type == "choice"
            else list(a.probabilities)
        )
    return out


def test_waiting_requests_share_one_engine_call_and_get_their_own_answers(checkpoint: Path) -> None:
    engine = Engine.load(checkpoint, state_cache_bytes=0)
    alone = [numbers(engine.answer(DecisionRequest(s, QUESTIONS))) for s in STATES]
    held = HeldEngine(engine)
    rounds: list[int] = []  # each round's questions, told before it runs (it sets the math threads)
    scheduler = Scheduler(held, max_batch_tokens=16_384, max_queue=16, before_round=rounds.append)
    try:
        first = scheduler.submit([DecisionRequest(STATES[0], QUESTIONS)])
        assert held.entered.wait(30)
        rest = [scheduler.submit([DecisionRequest(s, QUESTIONS)]) for s in STATES[1:]]
        assert scheduler.depth == 3
        held.release.set()
        outcomes = [first.result(30), *(job.result(30) for job in rest)]
    finally:
        held.release.set()
        scheduler.close()
    assert held.calls == [1, 3]
    assert rounds == [3, 9]
    assert [o.round_requests for o in outcomes] == [1, 3, 3, 3]
    for outcome, expected in zip(outcomes, alone):
        assert numbers(outcome.results[0]) == pytest.approx(expected, abs=1e-5)


def answer_while_the_first_is_held(held: HeldEngine, requests: list[DecisionRequest], budget: int) -> None:
    """The first request enters the engine and is held there while the others queue behind it;
    then every request is answered, in rounds under ``budget`` tokens."""
    scheduler = Scheduler(held, max_batch_tokens=budget, max_queue=16)
    try:
        jobs = [scheduler.submit([requests[0]])]
        assert held.entered.wait(30)
        jobs += [scheduler.submit([r]) for r in requests[1:]]
        held.release.set()
        for job in jobs:
            job.result(30)
    finally:
        held.release.set()
        scheduler.close()


def test_the_token_budget_splits_what_waits_into_rounds(checkpoint: Path) -> None:
    held = HeldEngine(Engine.load(checkpoint))
    requests = [DecisionRequest(s, QUESTIONS) for s in STATES]
    budget = max(estimate_tokens(r) for r in requests) * 2  # two requests a round
    answer_while_the_first_is_held(held, requests, budget)
    assert held.calls == [1, 2, 1]


def test_concurrent_http_requests_are_packed_into_shared_passes(checkpoint: Path) -> None:
    held = HeldEngine(Engine.load(checkpoint))
    with serving(ServerSettings(str(checkpoint)), engine_loader(held)) as client, ThreadPoolExecutor(5) as pool:
        first = pool.submit(client.post, "/v1/systemone", json=body(state="first", options={"return_meta": True}))
        assert held.entered.wait(30)
        rest = [
            pool.submit(client.post, "/v1/systemone", json=body({"q": NOUL}, state=s, options={"return_meta": True}))
            for s in STATES
        ]
        wait_until(lambda: runtime(client).scheduler.depth == len(STATES), "the requests to queue")  # type: ignore[union-attr]
        held.release.set()
        metas = [f.result().json()["meta"] for f in (first, *rest)]
        assert [m["batched_requests"] for m in metas] == [1] + [len(STATES)] * len(STATES)
        assert 'vsr_runtime_pass_requests_bucket{le="4.0"} 2.0' in client.get("/metrics").text


def test_no_request_waits_behind_more_than_one_budget_of_others(checkpoint: Path) -> None:
    """Rounds take waiting requests in arrival order, each as many as fit the token budget: no
    request is overtaken, and a round leaves one waiting only when those before it fill the budget."""
    held = HeldEngine(Engine.load(checkpoint))
    words = " ".join(STATES).split()
    requests = [DecisionRequest(" ".join(words[: 3 + 5 * (i % 4)]), QUESTIONS[: 1 + i % 3]) for i in range(12)]
    size = {id(r): estimate_tokens(r) for r in requests}
    budget = 3 * max(size.values())  # a few requests a round, fewer when the large ones meet
    answer_while_the_first_is_held(held, requests, budget)
    rounds = held.rounds[1:]  # the first round held requests[0] alone while the rest arrived
    assert [id(r) for round_ in rounds for r in round_] == [id(r) for r in requests[1:]]  # arrival order
    answered = 1
    for round_ in rounds:
        tokens = sum(size[id(r)] for r in round_)
        assert tokens <= budget or len(round_) == 1
        answered += len(round_)
        if answered < len(requests):  # the next one waited only because it did not fit
            assert tokens + size[id(requests[answered])] > budget
    assert len(rounds) > 2


# ---------------------------------------------------------------------------- slices, deadlines, callers gone


def batch_of(n: int) -> list[DecisionRequest]:
    return [DecisionRequest(f"{STATES[i % len(STATES)]} ({i})", QUESTIONS[:1]) for i in range(n)]


def test_a_request_arriving_while_a_batch_runs_joins_the_next_round(checkpoint: Path) -> None:
    """A batch is answered a slice at a time: a request that arrives meanwhile is answered in the
    very next round, long before the batch ends, with the answer it gets alone."""
    engine = Engine.load(checkpoint, state_cache_bytes=0)
    one = DecisionRequest(STATES[0], QUESTIONS)
    alone = numbers(engine.answer(one))
    held = HeldEngine(engine)
    scheduler = Scheduler(held, max_batch_tokens=16_384, max_queue=16)
    try:
        batch = batch_of(40)
        big = scheduler.submit(batch)
        assert held.entered.wait(30)
        small = scheduler.submit([one])
        held.release.set()
        answered = small.result(30)
        done = big.result(30)
    finally:
        held.release.set()
        scheduler.close()
    assert held.rounds[0] == batch[:1]  # the first slice: one request, before any round was measured
    assert one in held.rounds[1]  # the next round
    assert len(held.rounds) > 2 and sum(held.calls) == 41  # the batch went on in slices after it
    assert numbers(answered.results[0]) == pytest.approx(alone, abs=1e-5)
    assert [p for r in done.results for p in numbers(r)] == pytest.approx(
        [p for r in batch for p in numbers(engine.answer(r))], abs=1e-5
    )


def test_a_batch_whose_deadline_passes_stops_between_slices(checkpoint: Path) -> None:
    held = HeldEngine(Engine.load(checkpoint))
    dropped: list[tuple[str, int]] = []
    scheduler = Scheduler(
        held, max_batch_tokens=16_384, max_queue=16, on_dropped=lambda why, n: dropped.append((why, n))
    )
    try:
        deadline = time.monotonic() + 0.2
        job = scheduler.submit(batch_of(30), deadline)
        assert held.entered.wait(30)
        wait_until(lambda: time.monotonic() > deadline, "the deadline to pass")
        held.release.set()
        with pytest.raises(DeadlineExceeded):
            job.result(30)
        after = scheduler.submit(batch_of(1))
        assert len(after.result(30).results) == 1  # the engine is free for the next request
    finally:
        held.release.set()
        scheduler.close()
    assert held.calls == [1, 1]  # the slice in the engine when the deadline passed, then the next request
    assert dropped == [("deadline", 29)]
    assert scheduler.depth == 0


def abandoned_in_the_engine(held: HeldEngine, requests: list[DecisionRequest]) -> tuple[Any, list[tuple[str, int]]]:
    """`requests` submitted; while the engine holds them their client goes away, and one more
    request comes, which is answered. The abandoned job, and what the scheduler counted dropped."""
    dropped: list[tuple[str, int]] = []
    scheduler = Scheduler(
        held, max_batch_tokens=16_384, max_queue=16, on_dropped=lambda why, n: dropped.append((why, n))
    )
    try:
        job = scheduler.submit(requests)
        assert held.entered.wait(30)
        scheduler.abandon(job, "client_closed")
        after = scheduler.submit(batch_of(1))
        held.release.set()
        assert len(after.result(30).results) == 1
    finally:
        held.release.set()
        scheduler.close()
    return job, dropped


def test_an_abandoned_batch_frees_the_engine_for_the_next_request(checkpoint: Path) -> None:
    held = HeldEngine(Engine.load(checkpoint))
    batch = batch_of(30)
    job, dropped = abandoned_in_the_engine(held, batch)
    assert held.rounds == [batch[:1], batch_of(1)]
    assert dropped == [("client_closed", 29)]
    assert not job.done()  # nobody waits for it: it is never answered


def test_a_batch_past_the_sidecars_deadline_gets_504_and_the_next_request_is_answered(checkpoint: Path) -> None:
    """Through the server: the sidecar's x-vsr-deadline-ms ends the batch's work, the client gets
    the JSON 504, and the metrics count the requests that never ran."""
    held = HeldEngine(Engine.load(checkpoint))
    batch = {"requests": {f"r{i}": body(state=f"{STATES[i % 4]} ({i})") for i in range(30)}}
    with serving(ServerSettings(str(checkpoint)), engine_loader(held)) as client, ThreadPoolExecutor(1) as pool:
        late = pool.submit(client.post, "/v1/systemone/batch", json=batch, headers={"x-vsr-deadline-ms": "300"})
        assert held.entered.wait(30)
        reply = late.result(30)  # answered while the engine still holds the batch's first slice
        assert reply.status_code == 504
        assert reply.json()["reason"] == "deadline_exceeded" and "300 ms" in reply.json()["detail"]["message"]
        held.release.set()
        answer = client.post("/v1/systemone", json=body())
        assert answer.status_code == 200 and 0 <= answer.json()["answers"]["urgent"]["noul"] <= 1
        metrics = client.get("/metrics").text
    assert 'vsr_runtime_dropped_requests_total{why="deadline"} 29.0' in metrics
    assert held.calls == [1, 1]


def test_an_engine_call_stops_at_the_next_pass_once_nobody_waits(checkpoint: Path) -> None:
    """A request of many questions on a small token budget takes many passes; ``stop`` is asked
    before each, and the call ends at the first that finds it true."""
    engine = Engine.load(checkpoint, state_cache_bytes=0, token_budget=256)
    request = DecisionRequest(STATES[0], QUESTIONS * 12)
    asked: list[bool] = []

    def stop() -> bool:
        asked.append(len(asked) >= 2)
        return asked[-1]

    with pytest.raises(Stopped):
        engine.answer_batch([request], stop=stop)
    assert asked == [False, False, True]  # the state's prefill, one question pass, then no more
    every: list[bool] = []
    engine.answer_batch([request], stop=lambda: every.append(False) or False)
    assert len(every) > 5  # unstopped, the same call takes many passes
    assert numbers(engine.answer(request)) == numbers(
        engine.answer_batch([request])[0]
    )  # and stop=None changes nothing


class HeldCall(HeldEngine):
    """HeldEngine for an engine that checks ``stop`` between its passes."""

    stops_between_passes = True

    def answer_batch(self, requests: list[DecisionRequest], stop: Any = None) -> list[Result]:
        self.entered.set()
        assert self.release.wait(60), "the test never released the engine"
        self.calls.append(len(requests))
        return self.engine.answer_batch(requests, stop=stop)


def test_a_long_request_abandoned_in_the_engine_stops_there_and_frees_it(checkpoint: Path) -> None:
    held = HeldCall(Engine.load(checkpoint, state_cache_bytes=0, token_budget=256))
    _, dropped = abandoned_in_the_engine(held, [DecisionRequest(STATES[0], QUESTIONS * 12)])
    assert dropped == [("client_closed", 1)]  # the request in the engine, given up at its first pass
    assert held.calls == [1, 1]


class Streaming(HeldEngine):
    """The real engine, taking 0.1 s a call more (a stand-in for a model slow enough that a slice
    holds one request), with a new one-request job arriving during each of its first calls."""

    def __init__(self, engine: Engine, arrivals: int) -> None:
        super().__init__(engine)
        self.release.set()
        self.arrivals = arrivals
        self.scheduler: Scheduler | None = None
        self.jobs: list[Any] = []

    def answer_batch(self, requests: list[DecisionRequest]) -> list[Result]:
        if self.arrivals and self.scheduler is not None:
            self.arrivals -= 1
            self.jobs.append(self.scheduler.submit([DecisionRequest(STATES[self.arrivals % 4], QUESTIONS[:1])]))
        time.sleep(0.1)
        return super().answer_batch(requests)


def test_a_stream_of_new_requests_slows_a_batch_but_never_stops_it(checkpoint: Path) -> None:
    engine = Streaming(Engine.load(checkpoint), arrivals=12)
    scheduler = engine.scheduler = Scheduler(engine, max_batch_tokens=16_384, max_queue=64)
    try:
        batch = batch_of(8)
        job = scheduler.submit(batch)
        job.result(60)
        for other in engine.jobs:
            other.result(60)
    finally:
        scheduler.close()
    had_batch = [any(r in batch for r in round_) for round_ in engine.rounds]
    last = max(i for i, has in enumerate(had_batch) if has)
    assert all(had_batch[i] or had_batch[i + 1] for i in range(last))  # the batch is in every other round at least
    assert all(len(round_) <= 2 for round_ in engine.rounds)  # and each newcomer's round holds at most one of it
