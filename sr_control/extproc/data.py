"""One listener's sidecar data (``sidecar/<listener>``) as typed, frozen values.

The control plane serves it as a TypedStruct (docs/xds/sidecar-versions.md); ``ListenerData.of``
reads the payload once per version, so a request only does dictionary lookups. A *member* is
anything a System One request can be sent to: a deployment, or a provider model of the
``systemone`` API. A *model* name resolves to members: a pool to its members, a deployment
``model`` to every deployment serving it, a ``systemone`` provider model to itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from sr_base.tracing import TracingSettings
from sr_control.apis import REGISTRY
from sr_control.config.model import Judge, Signal, VirtualModel
from sr_control.decide.rules import VirtualModelPlan, compile_virtual_model

SYSTEMONE_API = "systemone"
# The standard's alias for "the default model" (system-one-standard.md §1.1): the official SDK
# sends it unless told otherwise.
DEFAULT_ALIASES = frozenset({"jev-latest"})


class DataError(ValueError):
    """Sidecar data this sidecar cannot read (the NACK's message names the field)."""


@dataclass(frozen=True, slots=True)
class Declared:
    """A deployment's declared ``capabilities``: what it answers when it publishes no card."""

    question_types: frozenset[str]
    modalities: frozenset[str]
    presets: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Member:
    name: str  # the deployment (or systemone provider model) name
    cluster: str  # the Envoy cluster that reaches it
    model: str  # the name it answers to upstream
    schema: str  # vllm-sr/5.0 or systemone/0.2
    endpoints: tuple[str, ...]  # its System One endpoint URLs (/v1/systemone)
    deviations: tuple[str, ...] = ()
    max_concurrency: int = 8
    declared: Declared | None = None
    api_key_env: str | None = None
    # Envoy's cluster for it balances several hosts: a Kubernetes Service's ready pods (EDS) or
    # several endpoints. ``--forwarding auto`` lets Envoy forward to such a member.
    several_hosts: bool = False

    @property
    def origin(self) -> str:
        """scheme://host:port of the first endpoint, for the calls the sidecar makes itself."""
        parts = urlsplit(self.endpoints[0])
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def prefix(self) -> str:
        """The path in front of /v1 (a runtime behind a path-routing proxy): usually ''."""
        path = urlsplit(self.endpoints[0]).path.rstrip("/")
        for tail in ("/v1/systemone", "/v1"):
            if path.endswith(tail):
                return path[: -len(tail)]
        return path

    @property
    def systemone_path(self) -> str:
        return urlsplit(self.endpoints[0]).path.rstrip("/") or "/v1/systemone"

    def path(self, tail: str) -> str:
        """``/v1/decisions``, ``/v1/models``, ``/health``: a runtime path behind this member's prefix."""
        return self.prefix + tail


@dataclass(frozen=True, slots=True)
class Provider:
    """An LLM provider model: where its requests go and the key the sidecar adds."""

    name: str
    cluster: str
    api: str  # the registered API of its api_format
    base_path: str  # the endpoints' path: /v1, /openai/v1
    api_key_env: str | None = None
    endpoints: tuple[str, ...] = ()  # for the calls the sidecar makes itself (a judge's escalation)


@dataclass(frozen=True, slots=True)
class Offer:
    api: str
    paths: tuple[str, ...]
    models: tuple[str, ...]
    schema: str | None = None
    max_deadline_ms: int | None = None


@dataclass(frozen=True, slots=True)
class AuthRef:
    keys_env: str | None = None
    keys_file: str | None = None


@dataclass(frozen=True, slots=True)
class ListenerData:
    listener: str
    version: str
    offers: Mapping[str, Offer]
    models: Mapping[str, tuple[str, ...]]  # decision model name -> member names
    members: Mapping[str, Member]
    providers: Mapping[str, Provider]  # LLM model name -> provider
    auth: AuthRef | None = None
    received_at: float = field(default=0.0, compare=False)
    # The virtual models the listener offers (docs/decide/), compiled once per version.
    virtual_models: Mapping[str, VirtualModelPlan] = field(default_factory=dict)
    tracing: TracingSettings | None = None  # where this version's spans go; None: not traced

    @property
    def systemone(self) -> Offer | None:
        return self.offers.get(SYSTEMONE_API)

    def default_model(self) -> str | None:
        """What a request without ``model`` (or with ``jev-latest``) asks for: the listener's
        first System One model."""
        offer = self.systemone
        return offer.models[0] if offer is not None and offer.models else None

    def resolve(self, model: str | None) -> tuple[str, tuple[Member, ...]] | None:
        """The model a request names (None and the standard's alias mean the default) and its
        members; None when the listener does not offer it."""
        offer = self.systemone
        name = self.default_model() if model is None or model in DEFAULT_ALIASES else model
        if offer is None or name is None or name not in offer.models:
            return None
        return name, tuple(self.members[m] for m in self.models.get(name, ()) if m in self.members)

    @classmethod
    def of(cls, payload: Mapping[str, Any], version: str, received_at: float = 0.0) -> ListenerData:
        """Read the payload of ``sidecar/<listener>``; DataError names what is wrong."""
        try:
            return _read(payload, version, received_at)
        except DataError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DataError(f"sidecar data of version {version}: {type(exc).__name__}: {exc}") from None


def _read(p: Mapping[str, Any], version: str, received_at: float) -> ListenerData:
    offers = {}
    for entry in p.get("apis", ()):
        api = str(entry["api"])
        deadline = entry.get("max_deadline_ms")
        offers[api] = Offer(
            api=api,
            paths=tuple(entry.get("paths", ())),
            models=tuple(str(m) for m in entry.get("models", ())),
            schema=entry.get("schema"),
            max_deadline_ms=int(deadline) if deadline is not None else None,  # a Struct number is a float
        )
    members: dict[str, Member] = {}
    for name, d in (p.get("deployments") or {}).items():
        members[name] = Member(
            name=name,
            cluster=str(d["cluster"]),
            model=str(d["model"]),
            schema=str(d.get("schema", "systemone/0.2")),
            endpoints=(str(d["endpoint"]),),
            deviations=tuple(d.get("deviations", ())),
            max_concurrency=int(d.get("max_concurrency", 8)),
            declared=_declared(d.get("capabilities")),
            api_key_env=d.get("api_key_env"),
            several_hosts="service" in d,
        )
    providers: dict[str, Provider] = {}
    for name, d in (p.get("providers") or {}).items():
        api = REGISTRY.canonical(str(d.get("api_format", "chat_completions")))
        if api == SYSTEMONE_API:
            members[name] = Member(
                name=name,
                cluster=str(d["cluster"]),
                model=name,
                schema=str(d.get("schema") or "systemone/0.2"),
                endpoints=tuple(str(e) for e in d["endpoints"]),
                api_key_env=d.get("api_key_env"),
                several_hosts=len(d["endpoints"]) > 1,
            )
        else:
            providers[name] = Provider(
                name,
                str(d["cluster"]),
                api,
                str(d.get("path", "/")).rstrip("/"),
                d.get("api_key_env"),
                tuple(str(e) for e in d.get("endpoints", ())),
            )
    models: dict[str, tuple[str, ...]] = {}
    for name, target in (p.get("models") or {}).items():
        if "pool" in target:
            models[name] = tuple(target["pool"])
        elif "deployments" in target:
            models[name] = tuple(target["deployments"])
        elif "provider" in target and target["provider"] in members:
            models[name] = (str(target["provider"]),)
    for name, names in models.items():
        missing = [m for m in names if m not in members]
        if missing:
            raise DataError(
                f"sidecar data of version {version}: model {name!r} names members it does not describe: "
                f"{', '.join(missing)}"
            )
    auth = p.get("auth")
    decide = p.get("decide")
    return ListenerData(
        listener=str(p["listener"]),
        version=version,
        offers=MappingProxyType(offers),
        models=MappingProxyType(models),
        members=MappingProxyType(members),
        providers=MappingProxyType(providers),
        auth=AuthRef(auth.get("keys_env"), auth.get("keys_file")) if auth else None,
        received_at=received_at,
        virtual_models=MappingProxyType(_virtual_models(str(decide))) if decide else MappingProxyType({}),
        tracing=TracingSettings.of(p.get("tracing")),
    )


def _virtual_models(text: str) -> dict[str, VirtualModelPlan]:
    """The ``decide`` entry (a JSON text of the config's sections) compiled into plans. The
    control plane validated the config; a section that no longer reads is the NACK's message."""
    doc = json.loads(text)
    signals = {n: Signal.model_validate(s) for n, s in doc.get("signals", {}).items()}
    judges = {n: Judge.model_validate(j) for n, j in doc.get("judges", {}).items()}
    return {
        name: compile_virtual_model(name, VirtualModel.model_validate(vm), signals, judges)
        for name, vm in doc.get("virtual_models", {}).items()
    }


def _declared(caps: Mapping[str, Any] | None) -> Declared | None:
    if not caps:
        return None
    return Declared(
        frozenset(caps.get("question_types", ())),
        frozenset(caps.get("modalities", ("text",))),
        frozenset(caps.get("presets", ())),
    )


__all__ = ["DEFAULT_ALIASES", "AuthRef", "DataError", "Declared", "ListenerData", "Member", "Offer", "Provider"]
