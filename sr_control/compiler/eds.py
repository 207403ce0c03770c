"""Endpoints (EDS): the hosts of a Service-backed deployment's cluster, as Envoy receives them.

Unlike every other resource these are not compiled from the config: discovery
(``sr_control/pools``) reports a Service's ready pods, and this turns them into one
ClusterLoadAssignment per cluster. Pure and deterministic: the same hosts give the same bytes
and version, in any order they were seen, so a watch event that changes nothing Envoy uses is
never pushed.
"""

from __future__ import annotations

from collections.abc import Iterable

from envoy.config.core.v3 import address_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2

from sr_control.compiler.protos import ClusterLoadAssignment
from sr_control.compiler.resources import Resource

Host = tuple[str, int]  # (IP address, port)


def load_assignment(cluster: str, hosts: Iterable[Host], hostname: str) -> ClusterLoadAssignment:
    """``cluster``'s hosts; ``hostname`` (the Service's DNS name) is what Envoy sends as Host."""
    lb_endpoints = [
        endpoint_components_pb2.LbEndpoint(
            endpoint=endpoint_components_pb2.Endpoint(
                address=address_pb2.Address(socket_address=address_pb2.SocketAddress(address=ip, port_value=port)),
                hostname=hostname,
            )
        )
        for ip, port in sorted(set(hosts))
    ]
    # An empty assignment is still sent: it tells Envoy the cluster has no host now, so the
    # cluster warms (and requests get 503 "no healthy upstream") instead of waiting.
    localities = [endpoint_components_pb2.LocalityLbEndpoints(lb_endpoints=lb_endpoints)] if lb_endpoints else []
    return ClusterLoadAssignment(cluster_name=cluster, endpoints=localities)


def endpoint_resource(cluster: str, hosts: Iterable[Host], hostname: str) -> Resource:
    return Resource.of(cluster, load_assignment(cluster, hosts, hostname))


__all__ = ["Host", "endpoint_resource", "load_assignment"]
