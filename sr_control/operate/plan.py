"""``vllm-sr config plan``: what an edit would change once live, and whether that is risky.

Both configs are compiled as the control plane compiles them, and the resources compared by
name and content version (the versions Envoy is sent), so the plan names exactly the resources
the edit would push:

    result = plan(new_text, "new.yaml", old_text, "live", legacy={"public": 0})
    result["risky"]        # a listener or an API removed, a 4.0 -> 5.0 switch still in use
"""

from __future__ import annotations

from typing import Any

from sr_control.compiler import CompileError, Resources, Settings, compile
from sr_control.compiler.protos import ENDPOINT, TYPE_NAMES, to_dict
from sr_control.config.load import validate_text
from sr_control.config.model import RouterConfig
from sr_control.xds.serve import listener_offers

# How many changed fields a changed resource shows; the rest are counted.
FIELDS_SHOWN = 12


class Invalid(Exception):
    def __init__(self, problems: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(problems)} problem(s)")
        self.problems = problems


def load(text: str, path: str) -> RouterConfig:
    """The config in ``text``, or Invalid with each problem at FILE:LINE:COL."""
    report = validate_text(text, path)
    if report.config is None:
        raise Invalid([p.as_json() | {"file": path} for p in report.errors])
    return report.config


def _compiled(config: RouterConfig, path: str, settings: Settings) -> Resources:
    try:
        return compile(config, settings)
    except CompileError as exc:
        raise Invalid(
            [{"file": path, "line": 0, "column": 0, "path": getattr(exc, "path", ""), "message": str(exc)}]
        ) from None


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out |= _flat(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out |= _flat(v, f"{prefix}[{i}]")
        return out
    return {prefix: value}


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 80 else text[:77] + "..."


def field_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The leaf fields that differ, as path -> [old, new] (None where absent), at most FIELDS_SHOWN."""
    a, b = _flat(old), _flat(new)
    paths = sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p))
    shown = {p: [_short(a.get(p)), _short(b.get(p))] for p in paths[:FIELDS_SHOWN]}
    return {"fields": shown, "more": max(0, len(paths) - FIELDS_SHOWN)}


def resource_changes(old: Resources, new: Resources) -> dict[str, dict[str, Any]]:
    """Per type (clusters, listeners, routes, sidecar): names added, removed and changed."""
    out = {}
    for type_url, name in TYPE_NAMES.items():
        if type_url == ENDPOINT:
            continue  # endpoints come from discovery, not from the file
        before, after = old.named(type_url), new.named(type_url)
        changed = sorted(n for n in before.keys() & after.keys() if before[n].version != after[n].version)
        out[name] = {
            "added": sorted(after.keys() - before.keys()),
            "removed": sorted(before.keys() - after.keys()),
            "changed": {n: field_diff(to_dict(before[n].message), to_dict(after[n].message)) for n in changed},
        }
    return out


def offer_changes(old: RouterConfig, new: RouterConfig) -> list[dict[str, Any]]:
    """Per listener still there: models gained and lost, members gained and lost per model."""
    before = {entry["name"]: entry for entry in listener_offers(old)}
    out = []
    for entry in listener_offers(new):
        was = before.get(entry["name"])
        if was is None:
            continue  # a new listener: all of it is new, and listed under resources
        models_before = {m: ms for api in was["apis"] for m, ms in api["models"].items()}
        models_after = {m: ms for api in entry["apis"] for m, ms in api["models"].items()}
        members = {
            m: {
                "gained": sorted(set(models_after[m]) - set(models_before[m])),
                "lost": sorted(set(models_before[m]) - set(models_after[m])),
            }
            for m in sorted(models_before.keys() & models_after.keys())
            if set(models_before[m]) != set(models_after[m])
        }
        gained = sorted(models_after.keys() - models_before.keys())
        lost = sorted(models_before.keys() - models_after.keys())
        if gained or lost or members:
            out.append({"listener": entry["name"], "models_gained": gained, "models_lost": lost, "members": members})
    return out


def risks(old: RouterConfig, new: RouterConfig, legacy: dict[str, int] | None) -> list[str]:
    """The changes that can break clients. ``legacy``: listener -> 4.0-only requests seen (from
    the sidecars), or None when unknown (a switch to 5.0 is then called risky)."""
    out = []
    before = {entry["name"]: entry for entry in listener_offers(old)}
    after = {entry["name"]: entry for entry in listener_offers(new)}
    for name in before.keys() - after.keys():
        out.append(f"listener {name} removed: its clients lose port {before[name]['port']}")
    for name in sorted(before.keys() & after.keys()):
        apis_before = {api["api"]: api for api in before[name]["apis"]}
        apis_after = {api["api"]: api for api in after[name]["apis"]}
        for api in sorted(apis_before.keys() - apis_after.keys()):
            out.append(f"listener {name}: API {api} removed")
        for api in sorted(apis_before.keys() & apis_after.keys()):
            was, now = apis_before[api]["schema"], apis_after[api]["schema"]
            if was == "vllm-sr/4.0" and now == "vllm-sr/5.0":
                seen = None if legacy is None else legacy.get(name, 0)
                if seen is None:
                    out.append(
                        f"listener {name}: schema 4.0 -> 5.0, and whether clients still send 4.0-only forms is "
                        "unknown (plan --against the live stack reads the sidecars' counters)"
                    )
                elif seen:
                    out.append(
                        f"listener {name}: schema 4.0 -> 5.0 while {seen} request(s) used 4.0-only forms "
                        "(vsr_systemone_listener_diagnostics_total): they would be refused"
                    )
    return sorted(out)


def plan(
    new_text: str,
    new_path: str,
    old_text: str,
    old_path: str,
    *,
    legacy: dict[str, int] | None = None,
    settings: Settings = Settings(),
) -> dict[str, Any]:
    """The plan; raises Invalid when the new config is invalid (the old one is trusted as served)."""
    new = load(new_text, new_path)
    old = load(old_text, old_path)
    changes = resource_changes(_compiled(old, old_path, settings), _compiled(new, new_path, settings))
    warnings = risks(old, new, legacy)
    return {
        "file": new_path,
        "against": old_path,
        "changed": any(c["added"] or c["removed"] or c["changed"] for c in changes.values()),
        "resources": changes,
        "offers": offer_changes(old, new),
        "warnings": warnings,
        "risky": bool(warnings),
    }


def render(result: dict[str, Any]) -> str:
    lines = [f"plan: {result['file']} against {result['against']}"]
    if not result["changed"]:
        lines.append("  no change: Envoy and the sidecars would be sent nothing")
    for kind, c in result["resources"].items():
        for name in c["added"]:
            lines.append(f"  + {kind} {name}")
        for name in c["removed"]:
            lines.append(f"  - {kind} {name}")
        for name, diff in c["changed"].items():
            lines.append(f"  ~ {kind} {name}")
            for path, (was, now) in diff["fields"].items():
                lines.append(f"      {path}: {was!r} -> {now!r}")
            if diff["more"]:
                lines.append(f"      ... and {diff['more']} more field(s)")
    for offer in result["offers"]:
        for m in offer["models_gained"]:
            lines.append(f"  listener {offer['listener']}: + model {m}")
        for m in offer["models_lost"]:
            lines.append(f"  listener {offer['listener']}: - model {m}")
        for m, ms in offer["members"].items():
            for member in ms["gained"]:
                lines.append(f"  listener {offer['listener']}: model {m} + member {member}")
            for member in ms["lost"]:
                lines.append(f"  listener {offer['listener']}: model {m} - member {member}")
    for w in result["warnings"]:
        lines.append(f"RISKY: {w}")
    return "\n".join(lines)


_NAMES = {"type": "array", "items": {"type": "string"}}
PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["file", "against", "changed", "resources", "offers", "warnings", "risky"],
    "properties": {
        "changed": {"type": "boolean"},
        "risky": {"type": "boolean"},
        "warnings": _NAMES,
        "resources": {
            "type": "object",
            "required": ["clusters", "listeners", "routes", "sidecar"],
            "additionalProperties": {
                "type": "object",
                "required": ["added", "removed", "changed"],
                "properties": {
                    "added": _NAMES,
                    "removed": _NAMES,
                    "changed": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "required": ["fields", "more"],
                            "properties": {"more": {"type": "integer", "minimum": 0}},
                        },
                    },
                },
            },
        },
        "offers": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["listener", "models_gained", "models_lost", "members"],
                "properties": {"models_gained": _NAMES, "models_lost": _NAMES},
            },
        },
    },
}

__all__ = ["PLAN_SCHEMA", "Invalid", "load", "plan", "render"]
