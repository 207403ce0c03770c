"""Compiled resources: type URL -> resources sorted by name, each with a content version.

A resource's version is the sha256 of its deterministic serialization, and a type's version is
the sha256 of its resources' names and versions, so compiling an unchanged config gives
unchanged versions and Envoy is sent nothing (go-control-plane ``HashResource``).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from google.protobuf import any_pb2
from google.protobuf.message import Message

from sr_control.compiler import names
from sr_control.compiler.errors import CompileError
from sr_control.compiler.protos import CLUSTER, LISTENER, PUSH_ORDER, ROUTE, SIDECAR, TYPE_NAMES
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.http.ext_proc.v3 import ext_proc_pb2
from envoy.config.route.v3 import route_components_pb2

_VERSION_CHARS = 16  # 64 bits: enough to tell versions apart, short enough to read in a log


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:_VERSION_CHARS]


@dataclass(frozen=True, slots=True)
class Resource:
    name: str
    message: Message  # never mutated once built
    version: str
    packed: any_pb2.Any  # packed once; every stream sends the same bytes

    @classmethod
    def of(cls, name: str, message: Message) -> Resource:
        packed = any_pb2.Any()
        packed.Pack(message, deterministic=True)
        return cls(name, message, digest(packed.value), packed)


class DuplicateResource(CompileError):
    """Two resources of one type share a name."""


class Resources(Mapping[str, tuple[Resource, ...]]):
    """Immutable: type URL -> resources sorted by name, with per-type and overall versions."""

    def __init__(self, by_type: Mapping[str, Iterable[Resource]]) -> None:
        table: dict[str, tuple[Resource, ...]] = {}
        versions: dict[str, str] = {}
        for type_url in sorted(by_type, key=_push_rank):
            items = tuple(sorted(by_type[type_url], key=lambda r: r.name))
            dups = sorted(n for n, count in Counter(r.name for r in items).items() if count > 1)
            if dups:
                raise DuplicateResource(f"{TYPE_NAMES.get(type_url, type_url)}: {', '.join(dups)} defined twice")
            table[type_url] = items
            versions[type_url] = digest("\n".join(f"{r.name} {r.version}" for r in items).encode())
        self._table = MappingProxyType(table)
        self._versions = MappingProxyType(versions)
        self._by_name = MappingProxyType({t: MappingProxyType({r.name: r for r in rs}) for t, rs in table.items()})
        self.version = digest("\n".join(f"{t} {v}" for t, v in versions.items()).encode())

    def __getitem__(self, type_url: str) -> tuple[Resource, ...]:
        return self._table.get(type_url, ())

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def type_version(self, type_url: str) -> str:
        return self._versions.get(type_url, "")

    def named(self, type_url: str) -> Mapping[str, Resource]:
        return self._by_name.get(type_url, MappingProxyType({}))

    def names(self, type_url: str) -> tuple[str, ...]:
        return tuple(r.name for r in self[type_url])


def _push_rank(type_url: str) -> int:
    return PUSH_ORDER.index(type_url) if type_url in PUSH_ORDER else len(PUSH_ORDER)


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
        for vhost in route_config.message.virtual_hosts:
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


def _connection_managers(listener: Message) -> Iterator[hcm_pb2.HttpConnectionManager]:
    for chain in listener.filter_chains:  # type: ignore[attr-defined]
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


__all__ = [
    "DuplicateResource", "Inconsistent", "Resource", "Resources",
    "consistency_problems", "consistent", "digest",
]
