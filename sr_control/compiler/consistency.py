"""The check that runs before anything is served: no resource refers to one that is not there.

Every route table a listener names, every cluster a route or the ext_proc filter names, and the
sidecar data version each sidecar route names must be among the compiled resources (after
go-control-plane's ``Snapshot.Consistent``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.ext_proc.v3 import ext_proc_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from google.protobuf.message import Message

from sr_control.compiler import names
from sr_control.compiler.errors import CompileError
from sr_control.compiler.protos import CLUSTER, LISTENER, ROUTE, SIDECAR, Listener, RouteConfiguration
from sr_control.compiler.resources import Resource, Resources


class Inconsistent(CompileError):
    """Resources that refer to resources that are not there."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def consistency_problems(resources: Resources) -> list[str]:
    """Every dangling reference: a listener's routes, a route's cluster, a route's sidecar data."""
    problems: list[str] = []
    clusters = set(resources.named(CLUSTER))
    routes = set(resources.named(ROUTE))
    sidecars = resources.named(SIDECAR)
    # A resource the last consistent set held, the very same object, still finds everything it
    # names while no route table or cluster went away; a route table also needs its sidecar data
    # unchanged (it carries that version). After an edit, only what the edit rebuilt is read.
    last = _LAST.resources
    if last is None or not (last.named(CLUSTER).keys() <= clusters and last.named(ROUTE).keys() <= routes):
        last = _NOTHING
    last_listeners, last_routes, last_sidecars = last.named(LISTENER), last.named(ROUTE), last.named(SIDECAR)
    for listener in resources[LISTENER]:
        if last_listeners.get(listener.name) is listener:
            continue
        refs = _LISTENER_REFERENCES.of(listener)
        if refs.routes <= routes and refs.clusters <= clusters:
            continue
        for kind, wanted in refs.each:
            if kind == "routes" and wanted not in routes:
                problems.append(f"{listener.name} names routes {wanted!r}, which are not compiled")
            elif kind == "cluster" and wanted not in clusters:
                problems.append(f"{listener.name}: ext_proc calls cluster {wanted!r}, which is not compiled")
    for route_config in resources[ROUTE]:
        sidecar_name = names.sidecar(route_config.name.removeprefix("route/"))
        sidecar = sidecars.get(sidecar_name)
        if last_routes.get(route_config.name) is route_config and last_sidecars.get(sidecar_name) is sidecar:
            continue
        refs = _ROUTE_REFERENCES.of(route_config)
        if refs.clusters <= clusters and (
            not refs.versions or (sidecar is not None and refs.versions == {sidecar.version})
        ):
            continue
        for route, kind, wanted in refs.each:
            if kind == "cluster" and wanted not in clusters:
                problems.append(
                    f"{route_config.name} route {route!r} goes to cluster {wanted!r}, which is not compiled"
                )
            elif kind == "sidecar" and (sidecar is None or sidecar.version != wanted):
                have = sidecar.version if sidecar else "none"
                problems.append(
                    f"{route_config.name} route {route!r} names sidecar data version {wanted}, compiled: {have}"
                )
    return problems


@dataclass(frozen=True, slots=True)
class _Refs:
    """What one resource refers to: each reference in order (for the messages), and as sets
    (to tell at once that all of them are there, the usual case)."""

    each: tuple[tuple[str, ...], ...]
    routes: frozenset[str] = frozenset()
    clusters: frozenset[str] = frozenset()
    versions: frozenset[str] = frozenset()


def _listener_references(message: Message) -> _Refs:
    refs = []
    for hcm in _connection_managers(cast(Listener, message)):
        wanted = hcm.rds.route_config_name if hcm.HasField("rds") else ""
        if wanted:
            refs.append(("routes", wanted))
        for http_filter in hcm.http_filters:
            if http_filter.typed_config.Is(ext_proc_pb2.ExternalProcessor.DESCRIPTOR):
                proc = ext_proc_pb2.ExternalProcessor()
                http_filter.typed_config.Unpack(proc)
                refs.append(("cluster", proc.grpc_service.envoy_grpc.cluster_name))
    return _Refs(tuple(refs), routes=_of_kind(refs, "routes"), clusters=_of_kind(refs, "cluster"))


def _route_references(message: Message) -> _Refs:
    route_config = cast(RouteConfiguration, message)
    refs: list[tuple[str, str, str]] = []
    for vhost in route_config.virtual_hosts:
        for route in vhost.routes:
            if route.route.cluster:
                refs.append((route.name, "cluster", route.route.cluster))
            version = _sidecar_version(route)
            if version is not None:
                refs.append((route.name, "sidecar", version))
    kinds = [(kind, wanted) for _, kind, wanted in refs]
    return _Refs(tuple(refs), clusters=_of_kind(kinds, "cluster"), versions=_of_kind(kinds, "sidecar"))


def _of_kind(refs: list[tuple[str, str]], kind: str) -> frozenset[str]:
    return frozenset(wanted for k, wanted in refs if k == kind)


class _References:
    """What each resource of one type refers to, read once per distinct resource: unpacking every
    listener's filters and every route's per-filter config is most of the check's cost, and a
    recompile after an edit serves almost every resource again unchanged. Keyed by the packed
    bytes themselves (their hash is computed once per bytes object), so the answer is exact;
    bounded, oldest first out (a resource still served is then read once more)."""

    def __init__(self, read: Callable[[Message], _Refs], limit: int) -> None:
        self.read = read
        self.limit = limit
        self._entries: dict[bytes, _Refs] = {}
        self._lock = threading.Lock()  # the control plane and a CLI compile may share a process

    def of(self, resource: Resource) -> _Refs:
        key = resource.packed.value
        refs = self._entries.get(key)  # a dict read is atomic; writes take the lock
        if refs is not None:
            return refs
        refs = self.read(resource.message)
        with self._lock:
            self._entries[key] = refs
            if len(self._entries) > self.limit:
                # Keep the newer half: amortized, unlike taking the oldest out one by one.
                self._entries = dict(list(self._entries.items())[self.limit // 2 :])
        return refs


# Each: two compiles' worth of a 10,000-listener config.
_LISTENER_REFERENCES = _References(_listener_references, 20_000)
_ROUTE_REFERENCES = _References(_route_references, 20_000)


class _Last:
    """The resources found consistent last (held whole: they are immutable)."""

    resources: Resources | None = None


_LAST = _Last()
_NOTHING = Resources({})


def consistent(resources: Resources) -> Resources:
    problems = consistency_problems(resources)
    if problems:
        raise Inconsistent(problems)
    _LAST.resources = resources
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
