"""Schema IDs and deviations: the names a config may use, and where each may be used.

Seed 000: ``systemone/0.2`` is the public standard; ``vllm-sr/5.0`` is 0.2 plus the vllm-sr
extension set; ``vllm-sr/4.0`` is the frozen legacy superset. A listener serves its clients in
5.0 or 4.0; an upstream (deployment or provider model) is called in 0.2 or 5.0. A deviation is a
rewriter applied after a client codec, valid only with the schemas it declares.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


class UnknownSchemaError(ValueError):
    """A schema ID or deviation name the registry does not hold."""


@dataclass(frozen=True, slots=True)
class SchemaId:
    id: str
    summary: str
    listener: bool  # a listener may serve its clients in this schema
    upstream: bool  # the router may call an upstream in this schema


@dataclass(frozen=True, slots=True)
class DeviationSpec:
    id: str
    summary: str
    applies_to: frozenset[str]


_SCHEMAS = (
    SchemaId("systemone/0.2", "the public System One API standard, 0.2", False, True),
    SchemaId("vllm-sr/5.0", "systemone/0.2 plus the vllm-sr 5.0 extension set", True, True),
    SchemaId("vllm-sr/4.0", "the legacy 4.0 runtime contract, a superset kept for old clients", True, False),
)

_DEVIATIONS = (
    DeviationSpec(
        "state_text",
        "send an object or array state as its exact json.dumps(state, ensure_ascii=False) text",
        frozenset({"systemone/0.2", "vllm-sr/5.0"}),
    ),
)

_ID = re.compile(r"^[a-z][a-z0-9-]*/[0-9]+\.[0-9]+$")


def _check() -> None:
    ids = [s.id for s in _SCHEMAS]
    problems = [f"malformed schema ID {i!r}" for i in ids if not _ID.match(i)]
    problems += [f"schema ID {i!r} registered twice" for i in set(ids) if ids.count(i) > 1]
    for dev in _DEVIATIONS:
        unknown = sorted(dev.applies_to - set(ids))
        if not dev.applies_to or unknown:
            problems.append(f"deviation {dev.id!r} applies to no registered schema {unknown}")
    if problems:
        raise RuntimeError("invalid schema registry: " + "; ".join(problems))


_check()

SCHEMAS: Mapping[str, SchemaId] = MappingProxyType({s.id: s for s in _SCHEMAS})
DEVIATIONS: Mapping[str, DeviationSpec] = MappingProxyType({d.id: d for d in _DEVIATIONS})
LISTENER_SCHEMAS: tuple[str, ...] = tuple(s.id for s in _SCHEMAS if s.listener)
UPSTREAM_SCHEMAS: tuple[str, ...] = tuple(s.id for s in _SCHEMAS if s.upstream)


def schema(schema_id: str) -> SchemaId:
    try:
        return SCHEMAS[schema_id]
    except KeyError:
        raise UnknownSchemaError(f"unknown schema {schema_id!r} (supported: {', '.join(sorted(SCHEMAS))})") from None


def deviation(name: str) -> DeviationSpec:
    try:
        return DEVIATIONS[name]
    except KeyError:
        raise UnknownSchemaError(f"unknown deviation {name!r} (supported: {', '.join(sorted(DEVIATIONS))})") from None
