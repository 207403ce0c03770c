"""EndpointSlices (``discovery.k8s.io/v1``) -> the ready hosts of one Service port. No I/O.

A Service's pods are spread over one or more EndpointSlices, labelled
``kubernetes.io/service-name``. Each slice lists endpoints (a pod's addresses and conditions)
and ports (the Service's port names with the pods' target port numbers). A host is
(first address, target port) of an endpoint whose ``ready`` condition is true or unset (the
API says to read unset as ready). Unready and terminating endpoints are left out: Envoy stops
sending to them as soon as it has the new assignment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Slice = Mapping[str, Any]  # one EndpointSlice object, as the API serves it in JSON


@dataclass(frozen=True, slots=True)
class Hosts:
    hosts: tuple[tuple[str, int], ...]  # sorted (address, port)
    problem: str | None = None  # why some or all hosts could not be read, for the log and /status


def ready_hosts(slices: Iterable[Slice], port_name: str | None = None) -> Hosts:
    """The ready hosts of the slices' port named ``port_name``, or of their only port."""
    hosts: set[tuple[str, int]] = set()
    problems: list[str] = []
    for item in slices:
        name = (item.get("metadata") or {}).get("name", "?")
        if item.get("addressType") not in ("IPv4", "IPv6"):
            problems.append(f"slice {name}: addressType {item.get('addressType')!r} is not an IP family; skipped")
            continue
        port, problem = _port(item.get("ports") or [], port_name)
        if port is None:
            # A slice with no endpoints yet often has no ports either: nothing is lost.
            if item.get("endpoints"):
                problems.append(f"slice {name}: {problem}")
            continue
        for endpoint in item.get("endpoints") or []:
            addresses = endpoint.get("addresses") or []
            ready = (endpoint.get("conditions") or {}).get("ready")
            if addresses and ready is not False:
                hosts.add((str(addresses[0]), port))
    return Hosts(tuple(sorted(hosts)), "; ".join(problems) or None)


def _port(ports: list[Mapping[str, Any]], port_name: str | None) -> tuple[int | None, str]:
    tcp = [p for p in ports if p.get("protocol", "TCP") == "TCP" and p.get("port")]
    if port_name is not None:
        named = [p for p in tcp if p.get("name") == port_name]
        if named:
            return int(named[0]["port"]), ""
        have = ", ".join(repr(p.get("name") or "") for p in tcp) or "none"
        return None, f"no TCP port named {port_name!r} (ports: {have})"
    if len(tcp) == 1:
        return int(tcp[0]["port"]), ""
    if not tcp:
        return None, "no TCP port"
    names = ", ".join(repr(p.get("name") or "") for p in tcp)
    return None, f"several ports ({names}); name one with the deployment's service.port_name"


__all__ = ["Hosts", "Slice", "ready_hosts"]
