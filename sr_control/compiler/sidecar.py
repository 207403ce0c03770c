"""The data an ext_proc sidecar needs to serve one listener, as one xDS resource per listener.

``sidecar/<listener>`` holds the listener's APIs (schema, models, deadline) and everything those
models reach: pools, deployments and provider models, each with the Envoy cluster that serves
it. Its version travels on every sidecar route as ``x-vsr-config-version``, so for each request
the sidecar uses the data of the version Envoy routed it with (docs/xds/sidecar-versions.md).
"""

from __future__ import annotations

from typing import Any

from sr_control.compiler import names
from sr_control.compiler.clusters import upstream
from sr_control.compiler.offer import ListenerOffer
from sr_control.config.model import RouterConfig


def sidecar_payload(config: RouterConfig, offer: ListenerOffer) -> dict[str, Any]:
    deployments_of: dict[str, list[str]] = {}
    for dep_name, dep in config.deployments.items():
        deployments_of.setdefault(dep.model, []).append(dep_name)
    providers = {m.name: (i, m) for i, m in enumerate(config.providers.models)}

    apis: list[dict[str, Any]] = []
    models: dict[str, Any] = {}
    reached_deployments: list[str] = []
    reached_providers: list[str] = []
    for o in offer.offers:
        entry: dict[str, Any] = {"api": o.api.name, "paths": list(o.api.paths), "models": list(o.models)}
        if o.schema is not None:
            entry["schema"] = o.schema
            entry["max_deadline_ms"] = o.deadline_ms
        apis.append(entry)
        for model in o.models:
            if model in config.pools:
                members = list(config.pools[model].members)
                models[model] = {"pool": members}
                reached_deployments += members
            elif model in deployments_of:
                models[model] = {"deployments": deployments_of[model]}
                reached_deployments += deployments_of[model]
            elif model in providers:
                models[model] = {"provider": model}
                reached_providers.append(model)

    deployments = {}
    for name in dict.fromkeys(reached_deployments):
        dep = config.deployments[name]
        deployments[name] = dep.model_dump(mode="json", by_alias=True, exclude_none=True) | {
            "cluster": names.deployment_cluster(name),
            "path": upstream([dep.endpoint], f"deployments.{name}.endpoint").base_path or "/",
        }
    provider_entries = {}
    for name in dict.fromkeys(reached_providers):
        index, model = providers[name]
        provider_entries[name] = model.model_dump(mode="json", by_alias=True, exclude_none=True) | {
            "cluster": names.provider_cluster(name),
            "path": upstream(model.endpoints, f"providers.models[{index}].endpoints").base_path or "/",
        }
    return {
        "listener": offer.name,
        "apis": apis,
        "models": models,
        "deployments": deployments,
        "providers": provider_entries,
    }
