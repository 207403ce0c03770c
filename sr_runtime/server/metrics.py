"""Prometheus metrics of one runtime server, in a registry of its own (`GET /metrics`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from sr_runtime.types import DecisionEngine

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "vsr_runtime_requests", "HTTP requests answered, by endpoint and status.", ["endpoint", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "vsr_runtime_request_seconds", "Seconds from a request's arrival to its answer, by endpoint.", ["endpoint"],
            buckets=_SECONDS, registry=self.registry,
        )
        self.queue_depth = Gauge("vsr_runtime_queue_depth", "Requests waiting for the engine.", registry=self.registry)
        self.pass_requests = Histogram(
            "vsr_runtime_pass_requests", "Requests answered together in one engine call.", buckets=_COUNTS, registry=self.registry
        )
        self.pass_questions = Histogram(
            "vsr_runtime_pass_questions", "Questions answered in one engine call.", buckets=_COUNTS, registry=self.registry
        )
        self.pass_seconds = Histogram(
            "vsr_runtime_pass_seconds", "Seconds of one engine call.", buckets=_SECONDS, registry=self.registry
        )

    def engine_round(self, requests: int, questions: int, seconds: float) -> None:
        self.pass_requests.observe(requests)
        self.pass_questions.observe(questions)
        self.pass_seconds.observe(seconds)

    def watch(self, engine: DecisionEngine, depth: Callable[[], int]) -> None:
        """Read the queue depth and the engine's state cache when scraped (set once it has loaded)."""
        self.queue_depth.set_function(lambda: float(depth()))
        self.registry.register(_StateCache(engine))

    def text(self) -> bytes:
        return generate_latest(self.registry)


class _StateCache(Collector):
    """The engine's state cache counters, as they stand; models without one have none to show."""

    def __init__(self, engine: DecisionEngine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        cache = getattr(self.engine, "state_cache", None)
        if cache is None:
            return
        for name, value, what in (
            ("hits", cache.stats.hits, "States found in the cache, reused across requests."),
            ("misses", cache.stats.misses, "States computed because the cache did not hold them."),
            ("evictions", cache.stats.evictions, "States dropped to keep the cache under its size."),
        ):
            yield CounterMetricFamily(f"vsr_runtime_state_cache_{name}", what, value=value)
