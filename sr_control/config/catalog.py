"""Which model names a config defines, and of which kind.

An LLM model is a provider model of an LLM API. A decision model is a pool, the ``model`` of a
deployment, or a provider model whose ``api_format`` is ``systemone``. Several deployments may
share a ``model``: the name then denotes all of them, and the router picks among them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sr_control.apis import REGISTRY, UnknownApiError
from sr_control.apis.registry import ModelKind
from sr_control.config.model import RouterConfig


@dataclass(frozen=True, slots=True)
class ModelCatalog:
    llm: tuple[str, ...]
    decision: tuple[str, ...]

    def of_kind(self, kind: ModelKind) -> tuple[str, ...]:
        return self.llm if kind == "llm" else self.decision

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
    for model in config.providers.models:
        target = llm if api_kind(model.api_format) == "llm" else decision
        if api_kind(model.api_format) is not None and model.name not in target:
            target.append(model.name)
    for deployment in config.deployments.values():
        if deployment.model not in decision:
            decision.append(deployment.model)
    for pool in config.pools:
        if pool not in decision:
            decision.append(pool)
    return ModelCatalog(tuple(llm), tuple(decision))
