"""Prometheus metrics of the control plane, in a registry of their own (one per server)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from sr_control.compiler.protos import TYPE_NAMES
from sr_control.xds.hooks import Hooks, StreamInfo


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.config_version = Gauge(
            "vsr_config_version",
            (
                "The config version served (label), valued by its generation: 1 for the first version this "
                "process served, then 2, 3, ..."
            ),
            ["version"],
            registry=self.registry,
        )
        self.reloads = Counter(
            "vsr_config_reload",
            (
                "Config reloads by result: ok (a new version is served), unchanged (same resources), invalid, "
                "unreadable, error (unexpected; traceback in the log)."
            ),
            ["result"],
            registry=self.registry,
        )
        self.pushes = Counter(
            "vsr_xds_pushes",
            "xDS responses answered by a node, by type and result (ack or nack).",
            ["type", "result"],
            registry=self.registry,
        )
        self.encoded = Counter(
            "vsr_xds_encoded_bytes",
            (
                "Bytes of xDS responses serialized, by type. Each distinct response is serialized once and shared "
                "by every node it goes to, so an edit adds the same here for 10 nodes or 2,000."
            ),
            ["type"],
            registry=self.registry,
        )
        self.streams = Gauge("vsr_xds_streams", "Open ADS streams by protocol.", ["protocol"], registry=self.registry)
        self.endpoints = Gauge(
            "vsr_discovery_endpoints",
            "Ready hosts served to Envoy (EDS) for each Service-backed deployment.",
            ["deployment"],
            registry=self.registry,
        )

    def served(self, version: str, generation: int) -> None:
        self.config_version.clear()
        self.config_version.labels(version=version).set(generation)

    def hooks(self) -> Hooks:
        def opened(info: StreamInfo) -> None:
            self.streams.labels(protocol=info.protocol).inc()

        def closed(info: StreamInfo) -> None:
            self.streams.labels(protocol=info.protocol).dec()

        def acked(info: StreamInfo, type_url: str, version: str) -> None:
            self.pushes.labels(type=TYPE_NAMES.get(type_url, type_url), result="ack").inc()

        def nacked(info: StreamInfo, type_url: str, version: str, message: str) -> None:
            self.pushes.labels(type=TYPE_NAMES.get(type_url, type_url), result="nack").inc()

        def encoded(info: StreamInfo, type_url: str, size: int) -> None:
            self.encoded.labels(type=TYPE_NAMES.get(type_url, type_url)).inc(size)

        return Hooks(opened=opened, closed=closed, acked=acked, nacked=nacked, encoded=encoded)

    def text(self) -> bytes:
        return generate_latest(self.registry)
