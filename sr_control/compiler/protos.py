"""The typed Envoy messages the compiler emits, their type URLs, and the sidecar data's form.

Every message type named in an ``"@type"`` of ``envoy_templates/`` is imported here: an Any's
type is resolved through the descriptor pool, which only knows imported modules.
``tests/compiler/test_templates.py`` checks that no ``@type`` is missing.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from envoy.config.bootstrap.v3 import bootstrap_pb2

# Resources served over xDS.
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2

# Types named by "@type" in the templates (imported for the descriptor pool).
from envoy.config.route.v3 import (
    route_components_pb2,  # noqa: F401  FilterConfig
    route_pb2,
)
from envoy.config.trace.v3 import opentelemetry_pb2  # noqa: F401  tracing
from envoy.extensions.access_loggers.filters.cel.v3 import cel_pb2  # noqa: F401  local replies
from envoy.extensions.access_loggers.grpc.v3 import als_pb2  # noqa: F401  outcomes to the sidecar
from envoy.extensions.access_loggers.stream.v3 import stream_pb2  # noqa: F401
from envoy.extensions.compression.zstd.decompressor.v3 import zstd_pb2  # noqa: F401
from envoy.extensions.filters.http.decompressor.v3 import decompressor_pb2  # noqa: F401
from envoy.extensions.filters.http.ext_proc.v3 import ext_proc_pb2  # noqa: F401
from envoy.extensions.filters.http.header_mutation.v3 import header_mutation_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.http.upstream_codec.v3 import upstream_codec_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2  # noqa: F401
from envoy.extensions.resource_monitors.downstream_connections.v3 import downstream_connections_pb2  # noqa: F401
from envoy.extensions.retry.host.previous_hosts.v3 import previous_hosts_pb2  # noqa: F401
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2  # noqa: F401
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message
from xds.type.v3 import typed_struct_pb2

# Aliases, usable in annotations; xds-protos ships no types, so to a checker each is Any.
Listener: TypeAlias = listener_pb2.Listener
RouteConfiguration: TypeAlias = route_pb2.RouteConfiguration
Cluster: TypeAlias = cluster_pb2.Cluster
ClusterLoadAssignment: TypeAlias = endpoint_pb2.ClusterLoadAssignment
Bootstrap: TypeAlias = bootstrap_pb2.Bootstrap
TypedStruct: TypeAlias = typed_struct_pb2.TypedStruct

_PREFIX = "type.googleapis.com/"
LISTENER = _PREFIX + Listener.DESCRIPTOR.full_name
ROUTE = _PREFIX + RouteConfiguration.DESCRIPTOR.full_name
CLUSTER = _PREFIX + Cluster.DESCRIPTOR.full_name
# The discovered hosts of a Service-backed deployment's cluster (EDS); not compiled from the
# config but built from what discovery sees (compiler/eds.py).
ENDPOINT = _PREFIX + ClusterLoadAssignment.DESCRIPTOR.full_name
# The sidecars' per-listener data (docs/xds/sidecar-versions.md) travels as a TypedStruct whose
# own type_url names the payload's schema.
SIDECAR = _PREFIX + TypedStruct.DESCRIPTOR.full_name
SIDECAR_PAYLOAD = "vllm-sr.io/sidecar.v1.Listener"

# Short names for logs, metrics and status.
TYPE_NAMES: dict[str, str] = {
    CLUSTER: "clusters",
    LISTENER: "listeners",
    ROUTE: "routes",
    SIDECAR: "sidecar",
    ENDPOINT: "endpoints",
}
# The order a change is pushed (make before break, docs/xds/serve.md): clusters before the
# listeners and routes that name them, listeners before the routes they name (Envoy warms a
# listener until its routes arrive), the sidecar data before the routes that carry its
# version. Endpoints (EDS) are not a step: they go out whenever they change or Envoy asks for a
# cluster's, even while a step waits for its ACK, since Envoy holds a new EDS cluster warming
# (and its cluster ACK) until the cluster's endpoints arrive (xds/stream.py).
PUSH_ORDER: tuple[str, ...] = (CLUSTER, LISTENER, SIDECAR, ROUTE)


def typed_struct(payload: dict[str, Any]) -> TypedStruct:
    return TypedStruct(type_url=SIDECAR_PAYLOAD, value=_struct(payload))


def struct_value(data: dict[str, Any]) -> struct_pb2.Value:
    """A JSON object as a protobuf Value, to build once and place in many payloads."""
    return _value(data)


def _struct(data: dict[str, Any]) -> struct_pb2.Struct:
    # Built bottom-up through constructors: several times faster than Struct.update.
    return struct_pb2.Struct(fields={k: _value(v) for k, v in data.items()})


def _value(v: Any) -> struct_pb2.Value:
    if isinstance(v, struct_pb2.Value):
        return v  # built once, shared (see sidecar.SidecarData)
    if isinstance(v, str):
        return struct_pb2.Value(string_value=v)
    if isinstance(v, bool):
        return struct_pb2.Value(bool_value=v)
    if isinstance(v, (int, float)):
        return struct_pb2.Value(number_value=v)
    if isinstance(v, dict):
        return struct_pb2.Value(struct_value=_struct(v))
    if isinstance(v, (list, tuple)):
        return struct_pb2.Value(list_value=struct_pb2.ListValue(values=[_value(x) for x in v]))
    if v is None:
        return struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)
    raise TypeError(f"sidecar data: {v!r} is not a JSON value")


def to_dict(message: Message) -> dict[str, Any]:
    """The message in proto3 JSON form with the proto's own field names (as Envoy's YAML)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


__all__ = [
    "CLUSTER",
    "ENDPOINT",
    "LISTENER",
    "PUSH_ORDER",
    "ROUTE",
    "SIDECAR",
    "SIDECAR_PAYLOAD",
    "TYPE_NAMES",
    "Bootstrap",
    "Cluster",
    "ClusterLoadAssignment",
    "Listener",
    "RouteConfiguration",
    "TypedStruct",
    "to_dict",
    "typed_struct",
]
