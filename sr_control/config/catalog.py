"""Which model names a config defines, and of which kind.

An LLM model is a provider model of an LLM API. A decision model is a pool, the ``model`` of a
deployment, or a provider model whose ``api_format`` is ``systemone``. Several deployments may
share a ``model``: the name then denotes all of them, and the router picks among them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sr_control.apis import REGISTRY, UnknownApiError
from sr_control.apis.registry import Api, ModelKind
from sr_control.config.model import RouterConfig


@dataclass(frozen=True, slots=True)
class ModelCatalog:
    llm: tuple[str, ...]
    decision: tuple[str, ...]
    formats: Mapping[str, str] = field(default_factory=dict)  # LLM model -> its API's registered name

    def of_kind(self, kind: ModelKind) -> tuple[str, ...]:
        return self.llm if kind == "llm" else self.decision

    def serving(self, api: Api) -> tuple[str, ...]:
        """The models an API serves when a listener lists none: every decision model for
        systemone; for an LLM API, the LLM models of its own format (a model of another format
        would need translating, which the router does not do)."""
        if api.kind == "decision":
            return self.decision
        return tuple(m for m in self.llm if self.formats.get(m) == api.name)

    def kind(self, name: str) -> ModelKind | None:
        if name in self.llm:
            return "llm"
        if name in self.decision:
            return "decision"
        return None


def api_kind(api_format: str) -> ModelKind | None:
    try:
        return REGISTRY.get(api_format).kind
    except UnknownApiError:
        return None


def catalog(config: RouterConfig) -> ModelCatalog:
    llm: list[str] = []
    decision: list[str] = []
    formats: dict[str, str] = {}
    for model in config.providers.models:
        target = llm if api_kind(model.api_format) == "llm" else decision
        if api_kind(model.api_format) is not None and model.name not in target:
            target.append(model.name)
            if target is llm:
                formats[model.name] = REGISTRY.canonical(model.api_format)
    for deployment in config.deployments.values():
        if deployment.model not in decision:
            decision.append(deployment.model)
    for pool in config.pools:
        if pool not in decision:
            decision.append(pool)
    # A virtual model (docs/decide/) is an LLM model that speaks the API of the models it
    # routes to (one API: the router does not translate; sr_control/decide/checks.py says so).
    for name, vm in config.virtual_models.items():
        spoken = [formats[m] for r in vm.routes for m in r.models if m in formats]
        if name not in llm and name not in decision:
            llm.append(name)
            if spoken:
                formats[name] = spoken[0]
    return ModelCatalog(tuple(llm), tuple(decision), formats)
