"""Compiled resources: type URL -> resources sorted by name, each with a content version.

A resource's version is the sha256 of its deterministic serialization, and a type's version is
the sha256 of its resources' names and versions, so compiling an unchanged config gives
unchanged versions and Envoy is sent nothing (go-control-plane ``HashResource``). Whether the
resources refer only to each other is ``consistency.py``'s question.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from google.protobuf import any_pb2
from google.protobuf.message import Message

from sr_control.compiler.errors import CompileError
from sr_control.compiler.protos import TYPE_NAMES

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
        for type_url in sorted(by_type, key=_rank):
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


# The overall version hashes the types in this fixed order, so it stays what it was when the
# push order changes.
_TYPES = tuple(TYPE_NAMES)


def _rank(type_url: str) -> int:
    return _TYPES.index(type_url) if type_url in _TYPES else len(_TYPES)


__all__ = ["DuplicateResource", "Resource", "Resources", "digest"]
