"""Prometheus metrics of one runtime server, in a registry of its own (`GET /metrics`).

Under `--workers N` (PROMETHEUS_MULTIPROC_DIR set) every worker writes prometheus_client's
multiprocess files and `GET /metrics` shows their sum, whichever worker answers it; the queue
depth and the state cache's counters are then written after each engine round instead of read
when scraped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from sr_runtime.types import DecisionEngine

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    def __init__(self) -> None:
        self.shared = os.environ.get("PROMETHEUS_MULTIPROC_DIR")  # a worker of several
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "vsr_runtime_requests",
            "HTTP requests answered, by endpoint and status.",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "vsr_runtime_request_seconds",
            "Seconds from a request's arrival to its answer, by endpoint.",
            ["endpoint"],
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "vsr_runtime_queue_depth",
            "Requests waiting for the engine.",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.pass_requests = Histogram(
            "vsr_runtime_pass_requests",
            "Requests answered together in one engine call.",
            buckets=_COUNTS,
            registry=self.registry,
        )
        self.pass_questions = Histogram(
            "vsr_runtime_pass_questions",
            "Questions answered in one engine call.",
            buckets=_COUNTS,
            registry=self.registry,
        )
        self.pass_seconds = Histogram(
            "vsr_runtime_pass_seconds", "Seconds of one engine call.", buckets=_SECONDS, registry=self.registry
        )
        self.dropped = Counter(
            "vsr_runtime_dropped_requests",
            "Requests (each of a batch counts one) dropped before the engine ran them, by why: "
            "deadline (it passed), client_closed (the client went away), shutting_down, failed.",
            ["why"],
            registry=self.registry,
        )

        self._watched: tuple[DecisionEngine, Callable[[], int]] | None = None
        self._cache_seen = {name: 0 for name in _CACHE_COUNTERS}
        self._cache_counters = (
            {
                name: Counter(f"vsr_runtime_state_cache_{name}", what, registry=self.registry)
                for name, what in _CACHE_COUNTERS.items()
            }
            if self.shared
            else {}
        )

    def engine_round(self, requests: int, questions: int, seconds: float) -> None:
        self.pass_requests.observe(requests)
        self.pass_questions.observe(questions)
        self.pass_seconds.observe(seconds)
        if self.shared and self._watched is not None:  # what a scrape of another worker cannot read
            engine, depth = self._watched
            self.queue_depth.set(depth())
            cache = getattr(engine, "state_cache", None)
            if cache is not None:
                for name, counter in self._cache_counters.items():
                    now = getattr(cache.stats, name)
                    counter.inc(now - self._cache_seen[name])
                    self._cache_seen[name] = now

    def dropped_requests(self, why: str, requests: int) -> None:
        self.dropped.labels(why).inc(requests)

    def watch(self, engine: DecisionEngine, depth: Callable[[], int]) -> None:
        """Read the queue depth and the engine's state cache when scraped (set once it has loaded)."""
        self._watched = (engine, depth)
        if not self.shared:
            self.queue_depth.set_function(lambda: float(depth()))
            self.registry.register(_StateCache(engine))

    def text(self) -> bytes:
        if self.shared:
            every = CollectorRegistry()
            MultiProcessCollector(every, path=self.shared)
            return generate_latest(every)
        return generate_latest(self.registry)


_CACHE_COUNTERS = {
    "hits": "States found in the cache, reused across requests.",
    "misses": "States computed because the cache did not hold them.",
    "evictions": "States dropped to keep the cache under its size.",
}


class _StateCache(Collector):
    """The engine's state cache counters, as they stand; models without one have none to show."""

    def __init__(self, engine: DecisionEngine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        cache = getattr(self.engine, "state_cache", None)
        if cache is None:
            return
        for name, what in _CACHE_COUNTERS.items():
            yield CounterMetricFamily(f"vsr_runtime_state_cache_{name}", what, value=getattr(cache.stats, name))
