"""The typed Envoy messages the compiler emits, and the one function that builds them.

Every message type named in an ``"@type"`` of ``envoy_templates/`` is imported here: ParseDict
resolves an Any's type through the descriptor pool, which only knows imported modules.
``tests/compiler/test_templates.py`` checks that no ``@type`` is missing.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

from google.protobuf import json_format, struct_pb2, symbol_database
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from sr_control.compiler.errors import CompileError

# Resources served over xDS.
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.config.bootstrap.v3 import bootstrap_pb2
from xds.type.v3 import typed_struct_pb2

# Types named by "@type" in the templates (imported for the descriptor pool).
from envoy.config.route.v3 import route_components_pb2  # noqa: F401  FilterConfig
from envoy.extensions.compression.zstd.decompressor.v3 import zstd_pb2  # noqa: F401
from envoy.extensions.filters.http.decompressor.v3 import decompressor_pb2  # noqa: F401
from envoy.extensions.filters.http.ext_proc.v3 import ext_proc_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2  # noqa: F401
from envoy.extensions.resource_monitors.downstream_connections.v3 import downstream_connections_pb2  # noqa: F401
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2  # noqa: F401
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401

Listener = listener_pb2.Listener
RouteConfiguration = route_pb2.RouteConfiguration
Cluster = cluster_pb2.Cluster
Bootstrap = bootstrap_pb2.Bootstrap
TypedStruct = typed_struct_pb2.TypedStruct

_PREFIX = "type.googleapis.com/"
LISTENER = _PREFIX + Listener.DESCRIPTOR.full_name
ROUTE = _PREFIX + RouteConfiguration.DESCRIPTOR.full_name
CLUSTER = _PREFIX + Cluster.DESCRIPTOR.full_name
# The sidecars' per-listener data (docs/xds/sidecar-versions.md) travels as a TypedStruct whose
# own type_url names the payload's schema.
SIDECAR = _PREFIX + TypedStruct.DESCRIPTOR.full_name
SIDECAR_PAYLOAD = "vllm-sr.io/sidecar.v1.Listener"

# Short names for logs, metrics and status, in the order a change is pushed: clusters before
# the listeners that route to them, listeners before the routes they name (Envoy warms a
# listener until its routes arrive).
TYPE_NAMES: dict[str, str] = {CLUSTER: "clusters", LISTENER: "listeners", ROUTE: "routes", SIDECAR: "sidecar"}
PUSH_ORDER: tuple[str, ...] = (CLUSTER, LISTENER, ROUTE, SIDECAR)

M = TypeVar("M", bound=Message)


class ProtoError(CompileError):
    """Compiled data that does not fit the Envoy type it is meant to be."""


def parse(data: dict[str, Any], message_type: type[M], what: str) -> M:
    """``data`` (proto3 JSON form) as a typed ``message_type``; a misspelled field or wrong type fails here.

    The same mapping as ``json_format.ParseDict`` for the forms templates use (the tests hold
    the two to equal output), about three times faster: compiling 1,000 listeners must take
    well under a second. Any values are packed deterministically, so versions are stable.
    """
    message = message_type()
    try:
        _fill(data, message)
    except _Misfit as exc:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.loc)
        raise ProtoError(f"{what}{where}: {exc.message}") from None
    return message


class _Misfit(Exception):
    """Raised deep inside a message; each level on the way out adds its key to ``loc``."""

    def __init__(self, message: str, loc: list[str | int] | None = None) -> None:
        self.message = message
        self.loc = loc or []


_db = symbol_database.Default()
_WRAPPERS = frozenset(
    f"google.protobuf.{n}"
    for n in ("DoubleValue", "FloatValue", "Int64Value", "UInt64Value", "Int32Value", "UInt32Value", "BoolValue", "StringValue", "BytesValue")
)
_WELL_KNOWN = _WRAPPERS | {"google.protobuf.Any", "google.protobuf.Duration", "google.protobuf.Struct"}
_INT64 = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)

# How each field of a message type is filled, worked out once per type.
_SCALAR, _CONVERTED, _MESSAGE, _LIST, _MESSAGES, _MAP, _MESSAGE_MAP = range(7)
_Plan = dict[str, tuple[str, int, FieldDescriptor, "str | None"]]


@cache
def _plan(descriptor: Descriptor) -> _Plan:
    """Field key (proto or JSON name, as ParseDict accepts both) -> (name, kind, field, oneof)."""
    plan: _Plan = {}
    for f in descriptor.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            kind = _MESSAGE_MAP if f.message_type.fields_by_name["value"].message_type is not None else _MAP
        elif f.is_repeated:
            kind = _MESSAGES if f.message_type is not None else _LIST
        elif f.message_type is not None:
            kind = _MESSAGE
        else:
            kind = _CONVERTED if f.enum_type is not None or f.type in _INT64 else _SCALAR
        oneof = f.containing_oneof.name if f.containing_oneof is not None else None
        plan[f.name] = plan[f.json_name] = (f.name, kind, f, oneof)
    return plan


def _fill(data: Any, message: Any) -> None:
    full_name = message.DESCRIPTOR.full_name
    if full_name not in _WELL_KNOWN:
        _fill_fields(data, message)
    elif full_name == "google.protobuf.Any":
        _fill_any(data, message)
    else:
        try:
            if full_name == "google.protobuf.Duration":
                message.FromJsonString(data)
            elif full_name == "google.protobuf.Struct":
                message.update(data)
            else:  # a wrapper such as UInt32Value
                message.value = _convert(message.DESCRIPTOR.fields_by_name["value"], data)
        except (TypeError, ValueError, AttributeError) as exc:
            raise _Misfit(f"{exc}") from None


# Packed Any values by content. Routes of one API share their ext_proc overrides, every
# listener carries the same filters, and a recompile after an edit repeats almost everything.
_PACKED: dict[str, tuple[str, bytes]] = {}
_PACKED_MAX = 50_000


def _fill_any(data: Any, message: Any) -> None:
    key = repr(data)
    packed = _PACKED.get(key)
    if packed is None:
        packed = _pack(data)
        if len(_PACKED) >= _PACKED_MAX:
            _PACKED.clear()
        _PACKED[key] = packed
    message.type_url, message.value = packed


def _pack(data: Any) -> tuple[str, bytes]:
    type_url = data.get("@type") if isinstance(data, dict) else None
    if not type_url:
        raise _Misfit('an Any needs "@type"')
    try:
        inner = _db.GetSymbol(type_url.rsplit("/", 1)[-1])()
    except KeyError:
        raise _Misfit(f"unknown type {type_url!r} (import its _pb2 module in protos.py)") from None
    fields = {k: v for k, v in data.items() if k != "@type"}
    _fill(fields["value"] if inner.DESCRIPTOR.full_name in _WELL_KNOWN else fields, inner)
    return type_url, inner.SerializeToString(deterministic=True)


def _fill_fields(data: Any, message: Any) -> None:
    if not isinstance(data, dict):
        raise _Misfit(f"a {message.DESCRIPTOR.full_name} is a mapping, not {data!r}")
    plan = _plan(message.DESCRIPTOR)
    oneofs: set[str] | None = None
    for key, value in data.items():
        entry = plan.get(key)
        if entry is None:
            raise _Misfit(f"{message.DESCRIPTOR.full_name} has no field {key!r}", [key])
        name, kind, f, oneof = entry
        if oneof is not None:
            oneofs = oneofs if oneofs is not None else set()
            if oneof in oneofs:
                raise _Misfit(f"a second value for oneof {oneof!r}", [key])
            oneofs.add(oneof)
        try:
            if kind == _SCALAR:
                setattr(message, name, value)  # the message checks the type
            elif kind == _MESSAGE:
                sub = getattr(message, name)
                _fill(value, sub)
                if not value:
                    sub.SetInParent()  # `ads: {}` means "set, empty": presence is the meaning
            elif kind == _MESSAGES:
                target = getattr(message, name)
                for i, item in enumerate(_as_list(value)):
                    try:
                        _fill(item, target.add())
                    except _Misfit as exc:
                        exc.loc.insert(0, i)
                        raise
            elif kind == _CONVERTED:
                setattr(message, name, _convert(f, value))
            elif kind == _LIST:
                getattr(message, name).extend(_convert(f, v) for v in _as_list(value))
            elif kind == _MESSAGE_MAP:
                target = getattr(message, name)
                for k, v in value.items():
                    try:
                        _fill(v, target[k])
                    except _Misfit as exc:
                        exc.loc.insert(0, k)
                        raise
            else:
                target = getattr(message, name)
                value_field = f.message_type.fields_by_name["value"]
                for k, v in value.items():
                    target[k] = _convert(value_field, v)
        except _Misfit as exc:
            exc.loc.insert(0, key)
            raise
        except (TypeError, ValueError, AttributeError) as exc:
            raise _Misfit(str(exc), [key]) from None


def _as_list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _Misfit(f"must be a list, not {value!r}")
    return value


def _convert(f: FieldDescriptor, value: Any) -> Any:
    """A JSON scalar as the field wants it: enum names to numbers, 64-bit integers from strings."""
    if f.enum_type is not None and isinstance(value, str):
        number = f.enum_type.values_by_name.get(value)
        if number is None:
            raise _Misfit(f"{value!r} is not a {f.enum_type.name} ({', '.join(f.enum_type.values_by_name)})")
        return number.number
    if f.type in _INT64 and isinstance(value, str):
        return int(value)  # proto3 JSON writes 64-bit integers as strings
    return value


def typed_struct(payload: dict[str, Any]) -> TypedStruct:
    return TypedStruct(type_url=SIDECAR_PAYLOAD, value=_struct(payload))


def _struct(data: dict[str, Any]) -> struct_pb2.Struct:
    # Built bottom-up through constructors: several times faster than Struct.update.
    return struct_pb2.Struct(fields={k: _value(v) for k, v in data.items()})


def _value(v: Any) -> struct_pb2.Value:
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
    raise ProtoError(f"sidecar data: {v!r} is not a JSON value")


def to_dict(message: Message) -> dict[str, Any]:
    """The message in proto3 JSON form with the proto's own field names (as Envoy's YAML)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


__all__ = [
    "CLUSTER", "LISTENER", "PUSH_ORDER", "ROUTE", "SIDECAR", "SIDECAR_PAYLOAD", "TYPE_NAMES",
    "Bootstrap", "Cluster", "Listener", "ProtoError", "RouteConfiguration", "TypedStruct",
    "parse", "to_dict", "typed_struct",
]
