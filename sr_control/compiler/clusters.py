"""Upstream clusters: one per deployment, one per provider model, the sidecar and the control plane.

Envoy owns load balancing, health checks, outlier detection and circuit breaking for every
upstream, so the sidecar only names a cluster. A deployment's ``max_concurrency`` is the number
of calls the router may have open to it at once (seed 000), which is exactly what Envoy's
circuit breaker counts.

A deployment backed by a Kubernetes Service is an EDS cluster: its hosts are the Service's ready
pods, which the control plane discovers and sends over ADS (``eds.py``), so pod churn changes
endpoints only, never a cluster, route or sidecar data. Where no control plane serves endpoints
(``envoy-static.yaml``), the same deployment resolves the Service's DNS name instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from sr_control.apis import REGISTRY
from sr_control.compiler import names
from sr_control.compiler.credentials import upstream_key_filters
from sr_control.compiler.errors import CompileError
from sr_control.compiler.limits import BUFFER_LIMIT
from sr_control.compiler.settings import Address, Settings
from sr_control.compiler.templates import fill
from sr_control.config.model import Deployment, ProviderModel, RouterConfig, Tracing


class ClusterError(CompileError):
    """Endpoints that one Envoy cluster cannot hold; ``path`` is the config field."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where one or more endpoint URLs point, as one cluster sees them."""

    scheme: str
    hosts: tuple[tuple[str, int], ...]
    base_path: str  # the URL path without a trailing slash: /v1, /v1/systemone

    @property
    def tls(self) -> bool:
        return self.scheme == "https"


def upstream(urls: Sequence[str], field: str) -> Upstream:
    """The cluster view of ``urls``; they must agree on scheme and path to share one cluster."""
    return _upstream(tuple(urls), field)


@lru_cache(maxsize=4096)
def _upstream(urls: tuple[str, ...], field: str) -> Upstream:
    parts = [urlsplit(u) for u in urls]
    schemes = {p.scheme for p in parts}
    paths = {p.path.rstrip("/") for p in parts}
    if len(schemes) > 1:
        raise ClusterError(
            field, f"endpoints mix {' and '.join(sorted(schemes))}; one model's endpoints share a scheme"
        )
    if len(paths) > 1:
        raise ClusterError(
            field, f"endpoints have different paths ({', '.join(sorted(paths))}); one model's endpoints share a path"
        )
    scheme = schemes.pop()
    default = 443 if scheme == "https" else 80
    hosts = tuple(dict.fromkeys((p.hostname or "", p.port or default) for p in parts))
    return Upstream(scheme, hosts, paths.pop())


def deployment_cluster(name: str, dep: Deployment, settings: Settings, *, eds: bool = True) -> dict[str, Any]:
    """``eds``: a Service-backed deployment takes its hosts over EDS; else from the Service's DNS name."""
    assert dep.endpoint is not None  # a Service-backed deployment's is derived from the Service
    up = upstream([dep.endpoint], f"deployments.{name}.endpoint")
    # vllm-srun serves GET /health (vllm-sr/5.0); the standard defines no health path.
    health = (
        fill("cluster/http_health_check", path="/health")
        if dep.schema_ == "vllm-sr/5.0"
        else fill("cluster/tcp_health_check")
    )
    n = dep.max_concurrency
    return _cluster(
        names.deployment_cluster(name),
        up,
        settings,
        health=[health],
        # Calls beyond max_concurrency wait in Envoy's queue (up to 4 per slot) rather than
        # failing at once; past that the client gets 503 with no upstream call.
        limits=dict(max_connections=n, max_pending_requests=4 * n, max_requests=n, max_retries=max(1, n // 4)),
        discovered=eds and dep.service is not None,
        filters=upstream_key_filters(dep.api_key_env) if dep.api_key_env else None,
    )


def provider_cluster(model: ProviderModel, index: int, settings: Settings) -> dict[str, Any]:
    up = upstream(model.endpoints, f"providers.models[{index}].endpoints")
    return _cluster(
        names.provider_cluster(model.name),
        up,
        settings,
        health=[fill("cluster/tcp_health_check")],
        limits=dict(max_connections=1024, max_pending_requests=1024, max_requests=1024, max_retries=3),
        filters=upstream_key_filters(model.api_key_env, REGISTRY.canonical(model.api_format))
        if model.api_key_env
        else None,
    )


def sidecar_cluster(settings: Settings) -> dict[str, Any]:
    # One gRPC stream per HTTP request: the stream limit is the proxy's concurrency limit.
    return _grpc_cluster(names.SIDECAR_CLUSTER, settings.sidecar, max_requests=65_536, http2={})


def xds_cluster(settings: Settings, keepalive_s: int = 30) -> dict[str, Any]:
    # The ADS stream idles between pushes. Pings notice a control plane that vanished without
    # closing the connection (its node died), so Envoy reconnects to the one that replaced it.
    http2 = {"connection_keepalive": {"interval": f"{keepalive_s}s", "timeout": "5s"}}
    planes = settings.control_planes
    # Several control planes: a stream lost with one is reopened on a host the LB picks, so a
    # dead one must be out of the pick at once: each is checked every second, one failed check
    # or one refused connect takes it out, and the first passing check brings it back.
    several = len(planes) > 1
    tls = settings.xds_tls
    transport = fill("cluster/xds_tls", cert=tls.cert, key=tls.key, ca=tls.ca) if tls is not None else None
    return _grpc_cluster(
        names.XDS_CLUSTER,
        planes,
        max_requests=1024,
        http2=http2,
        health=[fill("cluster/xds_health_check")] if several else None,
        outliers=fill("cluster/xds_outlier_detection") if several else None,
        transport=transport,
    )


def otlp_cluster(tracing: Tracing) -> dict[str, Any]:
    """The collector Envoy exports its spans to over OTLP/gRPC (``tracing.otlp_endpoint``)."""
    return _grpc_cluster(names.OTLP_CLUSTER, Address.parse(tracing.otlp_endpoint), max_requests=1024, http2={})


def clusters(config: RouterConfig, settings: Settings, *, eds: bool = True) -> list[dict[str, Any]]:
    """``eds=False`` for a bootstrap that holds everything inline: no control plane serves endpoints."""
    out = [deployment_cluster(name, dep, settings, eds=eds) for name, dep in config.deployments.items()]
    out += [provider_cluster(model, i, settings) for i, model in enumerate(config.providers.models)]
    out.append(sidecar_cluster(settings))
    if config.tracing is not None:
        out.append(otlp_cluster(config.tracing))
    return out


def _cluster(
    name: str,
    up: Upstream,
    settings: Settings,
    *,
    health: list[Any],
    limits: dict[str, int],
    discovered: bool = False,
    filters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    static = all(_is_ip(host) for host, _ in up.hosts)
    endpoints = [fill("cluster/endpoint", address=_socket(host, port), hostname=host) for host, port in up.hosts]
    return fill(
        "cluster/cluster",
        name=name,
        discovery="EDS" if discovered else "STATIC" if static else "STRICT_DNS",
        lb_policy="LEAST_REQUEST",
        dns_lookup_family=None if static or discovered else "V4_PREFERRED",
        connect_timeout="5s",
        buffer_limit=BUFFER_LIMIT,
        load_assignment=None if discovered else fill("cluster/load_assignment", name=name, endpoints=endpoints),
        eds_cluster_config=fill("cluster/eds_cluster_config") if discovered else None,
        ignore_health_on_host_removal=True if discovered else None,
        protocol={"http_protocol_options": {}},
        upstream_options={"auto_sni": True, "auto_san_validation": True} if up.tls else None,
        http_filters=filters,
        outlier_detection=fill("cluster/outlier_detection"),
        health_checks=health,
        transport_socket=fill("cluster/tls", ca_file=settings.ca_file) if up.tls else None,
        **limits,
    )


def _grpc_cluster(
    name: str,
    addresses: Address | Sequence[Address],
    *,
    max_requests: int,
    http2: dict[str, Any],
    health: list[Any] | None = None,
    outliers: dict[str, Any] | None = None,
    transport: dict[str, Any] | None = None,
) -> dict[str, Any]:
    addresses = (addresses,) if isinstance(addresses, Address) else tuple(addresses)
    endpoints = [
        fill("cluster/endpoint", address={"pipe": {"path": a.path}}, hostname=None)
        if a.path
        else fill("cluster/endpoint", address=_socket(a.host, a.port), hostname=a.host)
        for a in addresses
    ]
    static = all(bool(a.path) or a.is_ip for a in addresses)
    return fill(
        "cluster/cluster",
        name=name,
        discovery="STATIC" if static else "STRICT_DNS",
        # Several control planes: a lost stream reopens on the next one in turn, not on a random
        # pick that may be the one just lost (its next check or refused connect ejects it).
        lb_policy="ROUND_ROBIN" if len(addresses) > 1 else "LEAST_REQUEST",
        dns_lookup_family=None if static else "V4_PREFERRED",
        connect_timeout="1s",
        buffer_limit=BUFFER_LIMIT,
        load_assignment=fill("cluster/load_assignment", name=name, endpoints=endpoints),
        eds_cluster_config=None,
        ignore_health_on_host_removal=None,
        # gRPC needs HTTP/2, set the non-deprecated way (gotcha 9).
        protocol={"http2_protocol_options": http2},
        upstream_options=None,
        http_filters=None,
        outlier_detection=outliers,
        health_checks=health,
        transport_socket=transport,
        max_connections=1024,
        max_pending_requests=1024,
        max_requests=max_requests,
        max_retries=3,
    )


def _socket(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _is_ip(host: str) -> bool:
    return Address(host=host).is_ip


__all__ = [
    "ClusterError",
    "Upstream",
    "clusters",
    "deployment_cluster",
    "otlp_cluster",
    "provider_cluster",
    "sidecar_cluster",
    "upstream",
    "xds_cluster",
]
