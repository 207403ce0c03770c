"""Data -> typed proto: templates' filled dicts become Envoy messages, strictly.

The same mapping as ``json_format.ParseDict`` for the forms templates use (the tests hold the
two to equal output), about three times faster: compiling 1,000 listeners must take well under
a second. A misspelled field, a wrong type or an unknown enum name fails here, in Python, with
the path to it, instead of as a NACK from a running Envoy. Any values are packed
deterministically, so versions are stable.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

from google.protobuf import symbol_database
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

import sr_control.compiler.protos  # noqa: F401 - registers every type an "@type" may name
from sr_control.compiler.errors import CompileError

M = TypeVar("M", bound=Message)


class ProtoError(CompileError):
    """Compiled data that does not fit the Envoy type it is meant to be."""


def parse(data: dict[str, Any], message_type: type[M], what: str) -> M:
    """``data`` (proto3 JSON form) as a ``message_type``; ``what`` names it in errors."""
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
        raise _Misfit(f"unknown type {type_url!r} (import its _pb2 module in compiler/protos.py)") from None
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


__all__ = ["ProtoError", "parse"]
