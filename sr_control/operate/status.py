"""``vllm-sr status``: what is live, on which nodes, and whether they are in step.

One report from the control plane's ``/status`` and ``/versions`` and each sidecar's ``/status``
and ``/metrics``. The sidecars are found from the control plane's nodes: each tells, in its xDS
node metadata, where its status port answers (a wildcard address is read as the node's peer):

    report = gather("127.0.0.1:18001")                       # every sidecar connected to it
    report = gather("127.0.0.1:18001", ["10.0.0.5:18081"])   # these sidecars instead
    report["in_step"]      # False when a node is behind or a NACK stands
    print(render(report))
"""

from __future__ import annotations

import ipaddress
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sr_control.operate.live import Unreachable, get_json, get_text, legacy_forms

# Types whose versions follow the config; endpoints (EDS) change with pods under one config version.
CONFIG_TYPES = ("clusters", "listeners", "routes", "sidecar")


def _kind(node: dict[str, Any]) -> str:
    types = set(node.get("types", {}))
    return "sidecar" if types <= {"sidecar"} and node["id"] != "vllm-sr-envoy" else "envoy"


def _config_version(acked: dict[str, str | None], history: list[dict[str, Any]]) -> str | None:
    """The config version whose per-type versions are what the node ACKed (for the types it holds)."""
    held = {t: v for t, v in acked.items() if t in CONFIG_TYPES}
    if not held:
        return None
    for entry in history:
        types = entry.get("types") or {}
        if all(types.get(t) == v for t, v in held.items()):
            return str(entry["version"])
    return None


def judge_node(node: dict[str, Any], want: dict[str, str], history: list[dict[str, Any]]) -> dict[str, Any]:
    """A node as the report shows it: its state (in_step, behind, refused) and the version it holds."""
    types = node.get("types", {})
    nack = next(
        ({"type": name, **t["nack"]} for name, t in types.items() if t.get("nack")),
        None,
    )
    behind = sorted(name for name, t in types.items() if name in want and t.get("acked") != want[name])
    if not types:
        behind = ["(nothing received yet)"]
    acked = {name: t.get("acked") for name, t in types.items()}
    state = "refused" if nack is not None else "behind" if behind else "in_step"
    since = [at for name, at in (node.get("acked_at") or {}).items() if name in CONFIG_TYPES and at]
    return {
        "id": node["id"],
        "kind": _kind(node),
        "status_address": node.get("status_address"),
        "protocol": node.get("protocol"),
        "peer": node.get("peer"),
        "connected_at": node.get("connected_at"),
        "state": state,
        "version": _config_version(acked, history),
        "since": max(since) if since else None,
        "behind": behind,
        "nack": nack,
        "types": types,
    }


def _peer_host(peer: str | None) -> str | None:
    """The host of a gRPC peer (``ipv4:10.0.0.7:58912``, ``ipv6:[::1]:58912``); None for a Unix peer."""
    kind, _, rest = (peer or "").partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return None


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def status_ports(nodes: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The sidecars' status addresses the nodes told (each once: N workers share one port), and
    warnings for the sidecars that cannot be reached from here. A wildcard address (0.0.0.0, ::)
    is the node's peer address; a loopback one is this host's only when the node is on it."""
    out: list[str] = []
    warnings = []
    for node in nodes:
        if node["kind"] != "sidecar":
            continue
        told = node.get("status_address")
        if not told:
            warnings.append(f"sidecar {node['id']} does not tell its status port (an older sidecar): give --sidecar")
            continue
        host, _, port = told.rpartition(":")
        host = host.strip("[]")
        peer = _peer_host(node.get("peer"))
        if host in ("", "0.0.0.0", "::"):
            if peer is None:
                warnings.append(f"sidecar {node['id']} listens on {told} from an unknown host: give --sidecar")
                continue
            host = peer
        elif _loopback(host) and peer is not None and not _loopback(peer):
            warnings.append(
                f"sidecar {node['id']} serves its status on {told} of its own host ({peer}): "
                "not reachable from here (port-forward it and give --sidecar)"
            )
            continue
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if address not in out:
            out.append(address)
    return out, warnings


def _sidecar(address: str) -> dict[str, Any]:
    try:
        doc = get_json(address, "/status")
        forms = legacy_forms(get_text(address, "/metrics"))
    except Unreachable as exc:
        return {"address": address, "reachable": False, "error": str(exc)}
    workers = [w for w in doc.get("workers", []) if isinstance(w, dict)]
    members: dict[str, dict[str, Any]] = {}
    open_calls: dict[str, int] = {}
    for worker in workers:
        for name, member in (worker.get("members") or {}).items():
            members.setdefault(name, member)  # every worker reads the same cards
        for name, n in (worker.get("open_calls") or {}).items():
            open_calls[name] = open_calls.get(name, 0) + int(n)
    return {
        "address": address,
        "reachable": True,
        "nodes": [w["node"] for w in workers if w.get("node")],
        "listen": next((w["listen"] for w in workers if w.get("listen")), None),
        "workers": len(workers),
        "ready": all(w.get("ready") for w in workers) if workers else False,
        "members": members,
        "open_calls": open_calls,
        "legacy_forms": forms,
    }


def gather(xds: str, sidecars: list[str] | None = None) -> dict[str, Any]:
    """The report; ``sidecars``: the status ports to read, None for those the nodes tell.
    Raises Unreachable when the control plane does not answer."""
    plane = get_json(xds, "/status")
    try:
        history = get_json(xds, "/versions").get("versions", [])
    except Unreachable:
        history = []  # an older control plane: nodes' versions are named only when in step
    want = plane.get("type_versions") or {}
    live = plane.get("version")
    if live and want:
        history = [{"version": live, "types": want}, *history]
    nodes = [judge_node(n, want, history) for n in plane.get("nodes", [])]
    unseen: list[str] = []
    if sidecars is None:
        sidecars, unseen = status_ports(nodes)
    # Asked at once: a fleet's sidecars (or a few that do not answer) cost one wait, not one each.
    with ThreadPoolExecutor(max_workers=min(16, len(sidecars) or 1)) as pool:
        side = list(pool.map(_sidecar, sidecars))
    problems = []
    for n in nodes:
        if n["state"] == "refused":
            nack = n["nack"]
            problems.append(f"{n['id']} refused {nack['type']} version {nack['version']}: {nack['message']}")
        elif n["state"] == "behind":
            problems.append(f"{n['id']} is behind on {', '.join(n['behind'])}")
    if not live:
        problems.append("the control plane serves no version yet")
    warnings = unseen + [f"sidecar status {s['address']} unreachable: {s['error']}" for s in side if not s["reachable"]]
    if not any(n["kind"] == "envoy" for n in nodes):
        warnings.append("no Envoy is connected to the control plane")
    last_error = plane.get("last_error")
    if last_error and (plane.get("last_reload") or {}).get("result") in ("invalid", "unreadable", "error"):
        first = (last_error.get("problems") or [{}])[0]
        warnings.append(
            f"the last edit was not served ({last_error['result']}): "
            f"{first.get('file', '')}:{first.get('line', 0)}:{first.get('column', 0)} {first.get('message', '')}"
        )
    return {
        "control_plane": {
            "address": xds,
            "version": live,
            "config": plane.get("config"),
            "generation": plane.get("generation"),
            "served_since": plane.get("served_since"),
            "last_reload": plane.get("last_reload"),
            "last_error": last_error,
        },
        "in_step": not problems,
        "problems": problems,
        "warnings": warnings,
        "nodes": nodes,
        "listeners": _listeners(plane.get("listeners") or [], side),
        "sidecars": side,
    }


def _listeners(listeners: list[dict[str, Any]], sidecars: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each listener's APIs, and each model's members with what the sidecars know of them."""
    seen = [s for s in sidecars if s.get("reachable")]
    out = []
    for listener in listeners:
        forms: dict[str, int] = {}
        for s in seen:
            for form, n in s["legacy_forms"].get(listener["name"], {}).items():
                forms[form] = forms.get(form, 0) + n
        apis = []
        for api in listener.get("apis", []):
            models = {
                model: [_member(name, seen) for name in members] for model, members in (api.get("models") or {}).items()
            }
            apis.append({"api": api["api"], "schema": api.get("schema"), "models": models})
        out.append({**{k: listener[k] for k in ("name", "address", "port")}, "apis": apis, "legacy_forms": forms})
    return out


def _member(name: str, sidecars: list[dict[str, Any]]) -> dict[str, Any]:
    known = next((s["members"][name] for s in sidecars if name in s["members"]), None)
    open_calls = sum(s["open_calls"].get(name, 0) for s in sidecars)
    if known is None:
        return {
            "name": name,
            "health": "unknown",
            "down": None,
            "question_types": [],
            "limits": {},
            "open_calls": open_calls,
        }
    return {
        "name": name,
        "health": "down" if known.get("down") else "up",
        "down": known.get("down"),
        "question_types": known.get("question_types", []),
        "limits": known.get("limits") or {},
        "modalities": known.get("modalities", []),
        "contract": known.get("contract"),
        "open_calls": open_calls,
    }


def render(report: dict[str, Any]) -> str:
    cp = report["control_plane"]
    lines = [
        f"control plane {cp['address']}: version {cp['version'] or '-'} (generation {cp['generation']}, "
        f"since {cp['served_since'] or '-'})",
        f"  config {cp['config']}",
        "",
        "nodes:",
    ]
    for n in report["nodes"]:
        held = n["version"] or "?"
        lines.append(
            f"  {n['state'].upper():8} {n['kind']:7} {n['id']}  holds {held}  over {n['protocol']} "
            f"from {n['peer']}  connected {n['connected_at']}"
        )
        if n["since"]:
            lines.append(f"           holds it since {n['since']}")
        if n["status_address"]:
            lines.append(f"           status port {n['status_address']}")
        if n["nack"]:
            lines.append(f"           NACK {n['nack']['type']} {n['nack']['version']}: {n['nack']['message']}")
        elif n["behind"]:
            lines.append(f"           behind on {', '.join(n['behind'])}")
    if not report["nodes"]:
        lines.append("  (none connected)")
    lines += ["", "listeners:"]
    members: dict[str, dict[str, Any]] = {}  # each member once, however many models it answers
    for listener in report["listeners"]:
        lines.append(f"  {listener['name']}  {listener['address']}:{listener['port']}")
        for api in listener["apis"]:
            schema = f" ({api['schema']})" if api["schema"] else ""
            lines.append(f"    {api['api']}{schema}")
            for model, pool in api["models"].items():
                members.update((m["name"], m) for m in pool)
                shown = ", ".join(f"{m['name']} {m['health']}" for m in pool)
                lines.append(f"      {model}: {shown or '(provider model)'}")
        if listener["legacy_forms"]:
            counts = ", ".join(f"{form} {n}" for form, n in sorted(listener["legacy_forms"].items()))
            lines.append(f"    4.0-only forms seen: {counts}")
    if members:
        lines += ["", "members:"]
    for name, m in sorted(members.items()):
        lines.append(
            f"  {m['health'].upper():7} {name}  open calls {m['open_calls']}"
            + (f"  ({m['down']})" if m["down"] else "")
        )
        if m["question_types"]:
            lines.append(f"          answers {', '.join(m['question_types'])}")
        if m["limits"]:
            shown = ", ".join(f"{k} {'-' if v is None else v}" for k, v in m["limits"].items())
            lines.append(f"          limits  {shown}")
    if report["sidecars"]:
        lines += ["", "sidecars:"]
    for s in report["sidecars"]:
        if s["reachable"]:
            lines.append(
                f"  {s['address']}  {s['workers']} worker(s), {'ready' if s['ready'] else 'NOT READY'}, "
                f"ext_proc on {s['listen'] or '?'}"
            )
        else:
            lines.append(f"  {s['address']}  unreachable")
    lines.append("")
    for w in report["warnings"]:
        lines.append(f"warning: {w}")
    if report["in_step"]:
        lines.append(f"in step: every node holds {cp['version']}")
    else:
        lines += [f"NOT IN STEP: {p}" for p in report["problems"]]
    return "\n".join(lines)


# What ``vllm-sr status --format json`` prints: the tests hold the output to this.
REPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["control_plane", "in_step", "problems", "warnings", "nodes", "listeners", "sidecars"],
    "properties": {
        "control_plane": {
            "type": "object",
            "required": ["address", "version", "config", "generation", "served_since", "last_reload", "last_error"],
            "properties": {"version": {"type": ["string", "null"]}, "config": {"type": ["string", "null"]}},
        },
        "in_step": {"type": "boolean"},
        "problems": {"type": "array", "items": {"type": "string"}},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "nodes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [
                    "id",
                    "kind",
                    "protocol",
                    "peer",
                    "connected_at",
                    "status_address",
                    "since",
                    "state",
                    "version",
                    "nack",
                    "types",
                ],
                "properties": {
                    "status_address": {"type": ["string", "null"]},
                    "since": {"type": ["string", "null"]},
                    "kind": {"enum": ["envoy", "sidecar"]},
                    "protocol": {"enum": ["sotw", "delta"]},
                    "state": {"enum": ["in_step", "behind", "refused"]},
                    "version": {"type": ["string", "null"]},
                    "nack": {
                        "oneOf": [
                            {"type": "null"},
                            {
                                "type": "object",
                                "required": ["type", "version", "message", "at"],
                                "properties": {"message": {"type": "string"}},
                            },
                        ]
                    },
                },
            },
        },
        "listeners": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "address", "port", "apis", "legacy_forms"],
                "properties": {
                    "apis": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["api", "schema", "models"],
                            "properties": {
                                "models": {
                                    "type": "object",
                                    "additionalProperties": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["name", "health", "question_types", "limits", "open_calls"],
                                            "properties": {
                                                "health": {"enum": ["up", "down", "unknown"]},
                                                "question_types": {"type": "array", "items": {"type": "string"}},
                                                "limits": {
                                                    "type": "object",
                                                    "additionalProperties": {"type": ["integer", "null"]},
                                                },
                                                "open_calls": {"type": "integer", "minimum": 0},
                                            },
                                        },
                                    },
                                }
                            },
                        },
                    },
                    "legacy_forms": {"type": "object", "additionalProperties": {"type": "integer"}},
                },
            },
        },
        "sidecars": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["address", "reachable"],
                "oneOf": [
                    {
                        "properties": {"reachable": {"const": True}},
                        "required": ["nodes", "listen", "workers", "ready", "members", "open_calls", "legacy_forms"],
                    },
                    {"properties": {"reachable": {"const": False}}, "required": ["error"]},
                ],
            },
        },
    },
}

__all__ = ["REPORT_SCHEMA", "gather", "judge_node", "render"]
