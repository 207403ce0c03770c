"""The codec registry: every schema's listener and client codec, and every deviation.

Built once at import from the codec tables, checked, and frozen (seed 000): schema IDs are
well formed and registered in ``schemas``, codecs are stateless, nothing is registered twice,
every spec a codec names carries a sha256, and every deviation applies to a registered client
schema. Config resolves schemas and deviations through it; an unknown ID raises
UnknownSchemaError listing the supported ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

from systemone import schemas
from systemone.client import CLIENTS, SchemaCodec
from systemone.deviations import DEVIATIONS, Deviation
from systemone.generated.fields import SPECS
from systemone.listener import LISTENERS, ListenerCodec
from systemone.schemas import UnknownSchemaError

T = TypeVar("T")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class CodecRegistry:
    listeners: Mapping[str, ListenerCodec]
    clients: Mapping[str, SchemaCodec]
    deviations: Mapping[str, Deviation]

    def listener(self, schema_id: str) -> ListenerCodec:
        return _get(self.listeners, schema_id, "listener schema")

    def client(self, schema_id: str) -> SchemaCodec:
        return _get(self.clients, schema_id, "upstream schema")

    def deviation(self, name: str) -> Deviation:
        return _get(self.deviations, name, "deviation")


def _get(table: Mapping[str, T], key: str, what: str) -> T:
    try:
        return table[key]
    except KeyError:
        raise UnknownSchemaError(f"unknown {what} {key!r} (supported: {', '.join(sorted(table))})") from None


def check(
    listeners: Mapping[str, ListenerCodec], clients: Mapping[str, SchemaCodec], deviations: Mapping[str, Deviation]
) -> list[str]:
    """Every problem with the tables at once."""
    problems = []
    for sid in [*listeners, *clients]:
        if sid not in schemas.SCHEMAS:
            problems.append(f"codec for unregistered schema {sid!r}")
    for sid, listener in listeners.items():
        if listener.schema != sid:
            problems.append(f"listener codec {listener.schema!r} registered as {sid!r}")
    for sid, client in clients.items():
        if client.id != sid:
            problems.append(f"client codec {client.id!r} registered as {sid!r}")
        if not client.stateless:
            problems.append(f"client codec {sid!r} is not stateless")
        path, digest = client.spec
        if not _SHA256.match(digest):
            problems.append(f"client codec {sid!r}: spec {path} has no sha256")
    for sid in schemas.SCHEMAS:
        if sid not in SPECS or not _SHA256.match(SPECS[sid][1]):
            problems.append(f"schema {sid!r} has no spec with a sha256")
    for name, dev in deviations.items():
        if dev.id != name:
            problems.append(f"deviation {dev.id!r} registered as {name!r}")
        if not dev.applies_to & set(clients):
            problems.append(f"deviation {name!r} applies to no registered client schema")
        if name not in schemas.DEVIATIONS:
            problems.append(f"deviation {name!r} is not declared in schemas.DEVIATIONS")
    return problems


def build(
    listeners: Mapping[str, ListenerCodec] = LISTENERS,
    clients: Mapping[str, SchemaCodec] = CLIENTS,
    deviations: Mapping[str, Deviation] = DEVIATIONS,
) -> CodecRegistry:
    problems = check(listeners, clients, deviations)
    if problems:
        raise RuntimeError("invalid codec registry: " + "; ".join(problems))
    return CodecRegistry(
        MappingProxyType(dict(listeners)), MappingProxyType(dict(clients)), MappingProxyType(dict(deviations))
    )


REGISTRY = build()
