"""The served config's Service-backed deployments -> their endpoints (EDS), from discovery.

One ClusterLoadAssignment per such deployment, named by its cluster, always sent (empty while
its Service has no ready pod, or before discovery has listed it), so Envoy never waits on a
cluster's endpoints. What discovery could not read (a Service of several ports without
``port_name``) is logged once per distinct problem and shown in ``/status``.
"""

from __future__ import annotations

import threading
from typing import Any

from sr_base import log
from sr_control.compiler import names
from sr_control.compiler.eds import endpoint_resource
from sr_control.compiler.protos import ENDPOINT
from sr_control.compiler.resources import Resources
from sr_control.config.model import RouterConfig
from sr_control.pools.discovery import Discovery, ServiceKey, key_of
from sr_control.xds.metrics import Metrics

_log = log.get_logger("vllm_sr.discovery")


class EndpointBuilder:
    def __init__(self, discovery: Discovery, metrics: Metrics) -> None:
        self.discovery = discovery
        self.metrics = metrics
        self._lock = threading.Lock()
        self._problems: dict[str, str] = {}  # deployment -> the problem last logged
        self._served: dict[str, dict[str, Any]] = {}  # deployment -> what /status shows

    def services(self, config: RouterConfig) -> set[ServiceKey]:
        return {
            key_of(dep.service, self.discovery.namespace)
            for dep in config.deployments.values()
            if dep.service is not None
        }

    def build(self, config: RouterConfig) -> Resources:
        out = []
        served: dict[str, dict[str, Any]] = {}
        problems: dict[str, str] = {}
        for name, dep in config.deployments.items():
            if dep.service is None:
                continue
            key = key_of(dep.service, self.discovery.namespace)
            found = self.discovery.hosts(dep.service)
            hosts = found.hosts if found is not None else ()
            hostname = f"{key.name}.{key.namespace}.svc"
            out.append(endpoint_resource(names.deployment_cluster(name), hosts, hostname))
            served[name] = {
                "service": str(key),
                "listed": found is not None,
                "hosts": [f"{ip}:{port}" for ip, port in hosts],
            }
            if found is not None and found.problem:
                problems[name] = served[name]["problem"] = found.problem
        with self._lock:
            for name, problem in problems.items():
                if self._problems.get(name) != problem:
                    _log.warning(
                        "endpointslices partly unreadable",
                        deployment=name,
                        service=served[name]["service"],
                        problem=problem,
                    )
            self._problems = problems
            self._served = served
        self.metrics.endpoints.clear()
        for name, entry in served.items():
            self.metrics.endpoints.labels(deployment=name).set(len(entry["hosts"]))
        return Resources({ENDPOINT: out})

    def status(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._served)


__all__ = ["EndpointBuilder"]
