"""What each listener serves: APIs, paths, schema, models and settings, resolved."""

from __future__ import annotations

from typing import Any

from sr_control.apis import LLM_APIS, REGISTRY
from sr_control.config.catalog import catalog
from sr_control.config.model import ApiSettings, Listener, RouterConfig


def offered_apis(listener: Listener) -> list[tuple[str, ApiSettings]]:
    """(canonical API name, settings) in file order; no ``apis`` map means the LLM APIs."""
    if listener.apis is None:
        return [(name, ApiSettings()) for name in LLM_APIS]
    return [(REGISTRY.canonical(key), settings) for key, settings in listener.apis.items()]


def explain(config: RouterConfig) -> dict[str, Any]:
    models = catalog(config)
    listeners = []
    for listener in config.listeners:
        apis = []
        for name, settings in offered_apis(listener):
            api = REGISTRY.get(name)
            served = settings.models if settings.models is not None else list(models.serving(api))
            apis.append(
                {
                    "api": name,
                    "paths": list(api.paths),
                    "schema": (settings.schema_ or api.listener_schema) if api.versioned else None,
                    "models": list(served),
                    "settings": {
                        key: getattr(settings, key) for key in api.settings if getattr(settings, key) is not None
                    },
                }
            )
        listeners.append({"name": listener.name, "address": listener.address, "port": listener.port, "apis": apis})
    return {"version": config.version, "listeners": listeners}


def explain_text(explained: dict[str, Any]) -> str:
    lines = [f"config format {explained['version']}"]
    if not explained["listeners"]:
        lines.append("no listeners")
    for listener in explained["listeners"]:
        lines.append(f"listener {listener['name']} on {listener['address']}:{listener['port']}")
        for api in listener["apis"]:
            head = f"  {api['api']}"
            if api["schema"]:
                head += f" ({api['schema']})"
            lines.append(head)
            lines.append(f"    paths:  {' '.join(api['paths'])}")
            lines.append(f"    models: {', '.join(api['models']) if api['models'] else '(none)'}")
            for key, value in api["settings"].items():
                lines.append(f"    {key}: {value}")
    return "\n".join(lines) + "\n"
