"""The API registry (seed 000, "listener 和上游共用一个 API 注册表").

APIs are named after the API, not the vendor: one vendor offers several APIs and many vendors
implement one API. The legacy names ``openai`` and ``anthropic`` are aliases that resolve
wherever an API name appears. The registry is built once from the literal table below, checked,
and frozen; nothing mutates it afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

ModelKind = Literal["llm", "decision"]


class UnknownApiError(KeyError):
    """An API name that is neither a registered name nor an alias."""

    def __init__(self, name: str, supported: tuple[str, ...]) -> None:
        self.name = name
        self.supported = supported
        super().__init__(name)

    def __str__(self) -> str:
        return f"unknown API {self.name!r} (supported: {', '.join(self.supported)})"


@dataclass(frozen=True, slots=True)
class Api:
    """One API: its paths, the schemas it can be spoken in and the settings a listener may set."""

    name: str
    paths: tuple[str, ...]
    kind: ModelKind
    # Schema defaults, per side. None: the API is unversioned (it evolves additively).
    listener_schema: str | None = None
    upstream_schema: str | None = None
    other_schemas: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()
    # What the API is called in an upstream's wire form label (seed 000's table).
    wire: str = ""

    @property
    def versioned(self) -> bool:
        return self.listener_schema is not None

    @property
    def schemas(self) -> tuple[str, ...]:
        """Every schema ID this API can be spoken in, defaults first."""
        ids = [s for s in (self.listener_schema, self.upstream_schema) if s is not None]
        ids += [s for s in self.other_schemas if s not in ids]
        return tuple(ids)


_TABLE: tuple[Api, ...] = (
    Api("chat_completions", ("/v1/chat/completions",), "llm", wire="openai/v1"),
    Api("responses", ("/v1/responses",), "llm", wire="openai/v1"),
    Api("messages", ("/v1/messages",), "llm", wire="anthropic/2023-06-01"),
    Api("images", ("/v1/images/*",), "llm", wire="openai/v1"),
    Api(
        "systemone",
        ("/v1/systemone", "/v1/systemone/batch", "/v1/decisions"),
        "decision",
        listener_schema="vllm-sr/5.0",
        upstream_schema="systemone/0.2",
        other_schemas=("vllm-sr/4.0",),
        settings=("max_deadline_ms",),
    ),
)

_ALIASES: Mapping[str, str] = {"openai": "chat_completions", "anthropic": "messages"}


class ApiRegistry:
    """Name and alias lookup over a checked, immutable table."""

    def __init__(self, table: tuple[Api, ...], aliases: Mapping[str, str]) -> None:
        problems = _check(table, aliases)
        if problems:
            raise ValueError("invalid API registry: " + "; ".join(problems))
        self._apis: Mapping[str, Api] = MappingProxyType({api.name: api for api in table})
        self._aliases: Mapping[str, str] = MappingProxyType(dict(aliases))

    def __iter__(self) -> Iterator[Api]:
        return iter(self._apis.values())

    def __contains__(self, name: object) -> bool:
        return name in self._apis or name in self._aliases

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._apis)

    @property
    def aliases(self) -> Mapping[str, str]:
        return self._aliases

    def canonical(self, name: str) -> str:
        """The registered name for ``name`` or its alias; raises UnknownApiError."""
        if name in self._apis:
            return name
        if name in self._aliases:
            return self._aliases[name]
        raise UnknownApiError(name, self.names + tuple(self._aliases))

    def get(self, name: str) -> Api:
        return self._apis[self.canonical(name)]

    def of_kind(self, kind: ModelKind) -> tuple[Api, ...]:
        return tuple(api for api in self._apis.values() if api.kind == kind)


def _check(table: tuple[Api, ...], aliases: Mapping[str, str]) -> list[str]:
    """Every problem with the table at once, so a bad edit shows all its mistakes."""
    problems: list[str] = []
    names = [api.name for api in table]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"API {name!r} is registered twice")
    paths = [p for api in table for p in api.paths]
    for path in sorted({p for p in paths if paths.count(p) > 1}):
        problems.append(f"path {path!r} belongs to two APIs")
    for alias, target in aliases.items():
        if alias in names:
            problems.append(f"alias {alias!r} shadows a registered API")
        if target not in names:
            problems.append(f"alias {alias!r} points at unknown API {target!r}")
    for api in table:
        if not api.paths or any(not p.startswith("/") for p in api.paths):
            problems.append(f"API {api.name!r} needs absolute paths")
        if (api.listener_schema is None) != (api.upstream_schema is None):
            problems.append(f"API {api.name!r} must default a schema on both sides or neither")
    return problems


REGISTRY = ApiRegistry(_TABLE, _ALIASES)
API_NAMES: tuple[str, ...] = REGISTRY.names
LLM_APIS: tuple[str, ...] = tuple(api.name for api in REGISTRY.of_kind("llm"))
