"""The sidecar's Prometheus metrics, in a registry of their own.

With ``--workers N`` every worker runs in prometheus_client's multiprocess mode (the supervisor
sets ``PROMETHEUS_MULTIPROC_DIR`` before they start), and the supervisor's ``/metrics`` adds
them up, so N workers show as one sidecar.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)

# The request seconds a sidecar adds are sub-millisecond; calls that go upstream take longer.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Family(Generic[M]):
    """A labelled metric whose children are looked up by their label values alone: a request
    touches four or five of them, and ``labels()`` checks and rebuilds its key each time."""

    def __init__(self, metric: M) -> None:
        self.metric: M = metric
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.diagnostics = Family(
            Counter(
                "vsr_systemone_listener_diagnostics",
                "System One requests per listener by form: each 4.0-only form a request used (states, choices, "
                "implicit_roles, ...), and how it went on (passthrough or convert). When a 4.0 listener's 4.0 forms "
                "stop counting up, it can switch to vllm-sr/5.0.",
                ["listener", "form"],
                registry=r,
            )
        )
        self.requests = Family(
            Counter(
                "vsr_extproc_requests",
                "Requests the sidecar handled, by listener, API and the status the client got.",
                ["listener", "api", "status"],
                registry=r,
            )
        )
        self.responses = Family(
            Counter(
                "vsr_listener_responses",
                "Every response a listener sent, from Envoy's access log (Envoy's own replies and timeouts "
                "included), by listener, status, and who answered: member, sidecar, route (404/405) "
                "or envoy (details: why).",
                ["listener", "status", "by", "details"],
                registry=r,
            )
        )
        self.seconds = Family(
            Histogram(
                "vsr_extproc_request_seconds",
                "Time from a request's headers reaching the sidecar to its answer leaving it.",
                ["listener", "api"],
                buckets=_BUCKETS,
                registry=r,
            )
        )
        self.upstream = Family(
            Counter(
                "vsr_extproc_upstream_calls",
                "Calls to pool members by result: ok, client_error (4xx), server_error (5xx), timeout, connection.",
                ["member", "result"],
                registry=r,
            )
        )
        self.failovers = Family(
            Counter(
                "vsr_extproc_failovers",
                "Requests answered by another member after the chosen one failed.",
                ["listener"],
                registry=r,
            )
        )
        self.versions = Family(
            Gauge(
                "vsr_extproc_config_versions",
                "Versions of sidecar data held, per listener.",
                ["listener"],
                registry=r,
                multiprocess_mode="max",
            )
        )
        self.version_waits = Family(
            Counter(
                "vsr_extproc_version_waits",
                "Requests that named a config version not received yet, by outcome (arrived, timeout).",
                ["outcome"],
                registry=r,
            )
        )
        self.errors = Family(
            Counter(
                "vsr_extproc_internal_errors",
                "Unexpected errors in the sidecar (each logged with its traceback; the client got 500).",
                ["api"],
                registry=r,
            )
        )

        # The Decide path (docs/decide/): an LLM request naming a virtual model.
        self.decide_requests = Family(
            Counter(
                "vsr_decide_requests",
                "LLM requests to a virtual model, by listener, the route that fired (default: none did; "
                "none: no route and no default, the client got the API's error) and the model chosen.",
                ["listener", "decision", "model"],
                registry=r,
            )
        )
        self.decide_answers = Family(
            Counter(
                "vsr_decide_signal_answers",
                "Signal answers, by signal and answer: noul P(yes) and score levels in buckets (0.0-0.2, ...; "
                "the level rounded), choice the option, set and span each label (or none), keyword "
                "true/false, unknown when the decision model failed or timed out.",
                ["signal", "answer"],
                registry=r,
            )
        )
        self.decide_seconds = Family(
            Histogram(
                "vsr_decide_seconds",
                "Time the sidecar spent deciding an LLM request to a virtual model (the decision-model calls "
                "included), by listener.",
                ["listener"],
                buckets=_BUCKETS,
                registry=r,
            )
        )
        self.decide_calls = Histogram(
            "vsr_decide_model_calls_per_request",
            "Decision-model calls per LLM request to a virtual model (one per decision model its signals name).",
            buckets=(0, 1, 2, 3, 4, 8),
            registry=r,
        )

    def text(self) -> bytes:
        return generate_latest(self.registry)


def upstream_result(status: int | None, failure: str | None = None) -> str:
    if failure is not None:
        return failure
    assert status is not None
    if status < 400:
        return "ok"
    return "client_error" if status < 500 else "server_error"


__all__ = ["Family", "Metrics", "upstream_result"]
