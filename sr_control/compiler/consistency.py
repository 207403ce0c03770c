"""The check that runs before anything is served: no resource refers to one that is not there.

Every route table a listener names, every cluster a route or the ext_proc filter names, and the
sidecar data version each sidecar route names must be among the compiled resources (after
go-control-plane's ``Snapshot.Consistent``).
"""

from __future__ import annotations

from collections.abc import Iterator

from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.ext_proc.v3 import ext_proc_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from sr_control.compiler import names
from sr_control.compiler.errors import CompileError
from sr_control.compiler.protos import CLUSTER, LISTENER, ROUTE, SIDECAR, Listener, RouteConfiguration
from sr_control.compiler.resources import Resources


class Inconsistent(CompileError):
    """Resources that refer to resources that are not there."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def consistency_problems(resources: Resources) -> list[str]:
    """Every dangling reference: a listener's routes, a route's cluster, a route's sidecar data."""
    problems: list[str] = []
    clusters = resources.named(CLUSTER)
    routes = resources.named(ROUTE)
    sidecars = resources.named(SIDECAR)
    for listener in resources[LISTENER]:
        for hcm in _connection_managers(listener.message):
            wanted = hcm.rds.route_config_name if hcm.HasField("rds") else ""
            if wanted and wanted not in routes:
                problems.append(f"{listener.name} names routes {wanted!r}, which are not compiled")
            for http_filter in hcm.http_filters:
                if http_filter.typed_config.Is(ext_proc_pb2.ExternalProcessor.DESCRIPTOR):
                    proc = ext_proc_pb2.ExternalProcessor()
                    http_filter.typed_config.Unpack(proc)
                    cluster = proc.grpc_service.envoy_grpc.cluster_name
                    if cluster not in clusters:
                        problems.append(f"{listener.name}: ext_proc calls cluster {cluster!r}, which is not compiled")
    for route_config in resources[ROUTE]:
        message: RouteConfiguration = route_config.message
        for vhost in message.virtual_hosts:
            for route in vhost.routes:
                cluster = route.route.cluster
                if cluster and cluster not in clusters:
                    problems.append(f"{route_config.name} route {route.name!r} goes to cluster {cluster!r}, which is not compiled")
                version = _sidecar_version(route)
                if version is not None:
                    sidecar = sidecars.get(names.sidecar(route_config.name.removeprefix("route/")))
                    if sidecar is None or sidecar.version != version:
                        have = sidecar.version if sidecar else "none"
                        problems.append(f"{route_config.name} route {route.name!r} names sidecar data version {version}, compiled: {have}")
    return problems


def consistent(resources: Resources) -> Resources:
    problems = consistency_problems(resources)
    if problems:
        raise Inconsistent(problems)
    return resources


def _connection_managers(listener: Listener) -> Iterator[hcm_pb2.HttpConnectionManager]:
    for chain in listener.filter_chains:
        for network_filter in chain.filters:
            if network_filter.typed_config.Is(hcm_pb2.HttpConnectionManager.DESCRIPTOR):
                hcm = hcm_pb2.HttpConnectionManager()
                network_filter.typed_config.Unpack(hcm)
                yield hcm


def _sidecar_version(route: route_components_pb2.Route) -> str | None:
    config = route.typed_per_filter_config.get("envoy.filters.http.ext_proc")
    if config is None:
        return None
    wrapper = route_components_pb2.FilterConfig()
    config.Unpack(wrapper)
    per_route = ext_proc_pb2.ExtProcPerRoute()
    wrapper.config.Unpack(per_route)
    for header in per_route.overrides.grpc_initial_metadata:
        if header.key == "x-vsr-config-version":
            return header.value
    return None


__all__ = ["Inconsistent", "consistency_problems", "consistent"]
