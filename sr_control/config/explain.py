"""What each listener serves: APIs, paths, schema, models and settings, resolved."""

from __future__ import annotations

from typing import Any

from sr_control.apis import LLM_APIS, REGISTRY
from sr_control.config.catalog import catalog
from sr_control.config.model import ApiSettings, Listener, RouterConfig
from sr_control.decide.request import kind_of
from sr_control.decide.rules import compile_virtual_model, condition_text


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
    out: dict[str, Any] = {"version": config.version, "listeners": listeners}
    if config.virtual_models:
        out["virtual_models"] = _virtual_models(config)
    if config.tracing is not None:
        out["tracing"] = config.tracing.model_dump(mode="json")
    return out


def _virtual_models(config: RouterConfig) -> list[dict[str, Any]]:
    """Each virtual model's routes in the order they are tried, and the calls it makes."""
    out = []
    for name, vm in config.virtual_models.items():
        plan = compile_virtual_model(name, vm, config.signals, config.judges)
        asks: dict[str, list[str]] = {}
        for signal_name, signal in plan.signals.items():
            if signal.asks_model:
                asks.setdefault(signal.model, []).append(f"{signal_name} ({kind_of(signal)})")
        after: dict[str, list[str]] = {}
        for signal_name, signal in plan.judge_signals.items():
            if signal.asks_model:
                after.setdefault(signal.model, []).append(f"{signal_name} ({kind_of(signal)})")
        out.append(
            {
                "name": name,
                "routes": [
                    {
                        "name": r.name,
                        "priority": r.priority,
                        "when": condition_text(r.when),
                        "models": list(r.models),
                        "judge": r.judge,
                    }
                    for _, r in plan.routes
                ],
                "default": vm.default,
                "calls": [{"model": model, "signals": names} for model, names in asks.items()],
                "keywords": [s for s, signal in plan.signals.items() if not signal.asks_model],
                "judges": [
                    {"name": j, "when": condition_text(judge.when), "deadline_ms": judge.deadline_ms}
                    for j, judge in plan.judges.items()
                ],
                "judge_calls": [{"model": model, "signals": names} for model, names in after.items()],
            }
        )
    return out


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
    for vm in explained.get("virtual_models", ()):
        lines.append(f"virtual model {vm['name']} (routes in the order tried)")
        for r in vm["routes"]:
            judge = f", judge {r['judge']}" if r["judge"] else ""
            lines.append(
                f"  {r['name']} [priority {r['priority']}]: {r['when']} -> {' then '.join(r['models'])}{judge}"
            )
        lines.append(f"  no route fires -> {vm['default'] or '(an error: no default)'}")
        for call in vm["calls"]:
            lines.append(f"  one call to {call['model']}: {', '.join(call['signals'])}")
        if vm["keywords"]:
            lines.append(f"  keyword signals (no call): {', '.join(vm['keywords'])}")
        for judge in vm["judges"]:
            lines.append(f"  judge {judge['name']}: escalate when {judge['when']}, within {judge['deadline_ms']} ms")
        for call in vm["judge_calls"]:
            lines.append(f"  after the answer, one call to {call['model']}: {', '.join(call['signals'])}")
    tracing = explained.get("tracing")
    if tracing is not None:
        lines.append(
            f"tracing: {tracing['sample_rate']:g}% of requests to OTLP collector {tracing['otlp_endpoint']}, "
            f"as {tracing['service_name']}-envoy, -sidecar and -runtime"
        )
    return "\n".join(lines) + "\n"
