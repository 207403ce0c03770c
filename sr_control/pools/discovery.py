"""Discovery: one watch per Kubernetes Service that the served config names, and their hosts.

The control plane tells discovery which Services the config names (``watch``), asks for each
one's ready hosts when it builds endpoints (``hosts``), and is called back (``on_change``)
whenever one of them changes. Outside Kubernetes, ``NoDiscovery`` answers "no hosts" and says
once, in the log and ``/status``, why a Service-backed deployment has none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from sr_base import log
from sr_control.config.model import ServiceRef
from sr_control.pools.slices import Hosts, ready_hosts

_log = log.get_logger("vllm_sr.discovery")


class ServiceKey(NamedTuple):
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Discovery(Protocol):
    namespace: str  # where a Service named without a namespace is looked for

    def subscribe(self, on_change: Callable[[], None]) -> None: ...
    def watch(self, keys: Iterable[ServiceKey]) -> None: ...
    def wait_synced(self, keys: Iterable[ServiceKey], timeout: float) -> None: ...
    def hosts(self, service: ServiceRef) -> Hosts | None: ...
    def status(self) -> dict[str, Any]: ...
    def stop(self) -> None: ...


def key_of(service: ServiceRef, namespace: str) -> ServiceKey:
    return ServiceKey(service.namespace or namespace, service.name)


def _nothing() -> None:
    return None


class KubernetesDiscovery:
    def __init__(self, api_client: Any, namespace: str, *, watch_factory: Callable[..., Any] | None = None) -> None:
        from sr_control.pools.kubernetes import SliceWatch

        self.namespace = namespace
        self._client = api_client
        self._make = watch_factory or SliceWatch
        self._watches: dict[ServiceKey, Any] = {}
        self._lock = threading.Lock()
        self._on_change: Callable[[], None] = _nothing

    def subscribe(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change

    def watch(self, keys: Iterable[ServiceKey]) -> None:
        """Watch exactly ``keys``: start the new ones, stop those no longer named."""
        wanted = set(keys)
        with self._lock:
            gone = [self._watches.pop(k) for k in list(self._watches) if k not in wanted]
            for key in sorted(wanted - self._watches.keys()):
                self._watches[key] = self._make(self._client, key.namespace, key.name, self._changed).start()
                _log.info("watching endpointslices", service=str(key))
        for w in gone:
            w.stop()

    def wait_synced(self, keys: Iterable[ServiceKey], timeout: float) -> None:
        """Wait until each of ``keys`` has been listed once, for ``timeout`` seconds at most, so a
        first push carries the pods instead of an empty pool."""
        deadline = time.monotonic() + timeout
        for key in keys:
            with self._lock:
                w = self._watches.get(key)
            if w is not None:
                w.synced.wait(max(0.0, deadline - time.monotonic()))

    def hosts(self, service: ServiceRef) -> Hosts | None:
        with self._lock:
            w = self._watches.get(key_of(service, self.namespace))
        if w is None or not w.synced.is_set():
            return None
        return ready_hosts(w.slices(), service.port_name)

    def status(self) -> dict[str, Any]:
        with self._lock:
            watches = dict(self._watches)
        return {
            "mode": "kubernetes",
            "namespace": self.namespace,
            "services": {
                str(k): {
                    "listed": w.synced.is_set(),
                    "slices": len(w.slices()),
                    "resource_version": w.resource_version,
                    "error": w.error,
                }
                for k, w in sorted(watches.items())
            },
        }

    def stop(self) -> None:
        self.watch(())

    def _changed(self) -> None:
        self._on_change()


class NoDiscovery:
    """Outside Kubernetes: Service-backed deployments have no hosts, and the log says why, once."""

    def __init__(
        self, namespace: str = "default", reason: str = "no --kubeconfig given and not running in a Kubernetes pod"
    ) -> None:
        self.namespace = namespace
        self.reason = reason
        self._told: set[ServiceKey] = set()
        self._keys: tuple[ServiceKey, ...] = ()

    def subscribe(self, on_change: Callable[[], None]) -> None:
        pass

    def watch(self, keys: Iterable[ServiceKey]) -> None:
        self._keys = tuple(sorted(set(keys)))
        for key in self._keys:
            if key not in self._told:
                self._told.add(key)
                _log.warning(
                    "service not discovered: its deployments have no endpoints", service=str(key), reason=self.reason
                )

    def wait_synced(self, keys: Iterable[ServiceKey], timeout: float) -> None:
        pass

    def hosts(self, service: ServiceRef) -> Hosts | None:
        return None

    def status(self) -> dict[str, Any]:
        return {"mode": "off", "reason": self.reason, "services": {str(k): {"listed": False} for k in self._keys}}

    def stop(self) -> None:
        pass


def discovery_from(kubeconfig: Path | None, namespace: str | None, *, in_cluster: bool) -> Discovery:
    """Kubernetes discovery from ``kubeconfig``, or in a pod from its service account; else none.
    Raises ValueError when the kubeconfig (or the pod's account) cannot be used."""
    if kubeconfig is None and not in_cluster:
        return NoDiscovery(namespace or "default")
    from sr_control.pools.kubernetes import api_client

    client, default_namespace = api_client(kubeconfig)
    return KubernetesDiscovery(client, namespace or default_namespace)


__all__ = ["Discovery", "KubernetesDiscovery", "NoDiscovery", "ServiceKey", "discovery_from", "key_of"]
