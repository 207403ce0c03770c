"""Reading compiled resources the way Envoy would, for tests that need no running Envoy."""

from __future__ import annotations

import json
from typing import Any

from sr_control.compiler import Resources, Settings, compile
from sr_control.compiler.output import plain
from sr_control.compiler.protos import CLUSTER, LISTENER, ROUTE, SIDECAR, to_dict
from sr_control.config.load import load_text


def compile_text(text: str, settings: Settings = Settings()) -> Resources:
    return compile(load_text(text), settings)


def route_config(resources: Resources, listener: str) -> dict[str, Any]:
    return plain(to_dict(resources.named(ROUTE)[f"route/{listener}"].message))


def route_for(
    resources: Resources, listener: str, path: str, method: str = "POST", headers: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The first route that matches, as Envoy matches them (path, prefix, :method, the presence
    of ``headers``: a client's request has no routing header, only the sidecar sets one)."""
    for route in route_config(resources, listener)["virtual_hosts"][0]["routes"]:
        match = route["match"]
        if "path" in match and path.split("?")[0] != match["path"]:
            continue
        if "prefix" in match and not path.startswith(match["prefix"]):
            continue
        methods = [h["string_match"]["exact"] for h in match.get("headers", []) if h["name"] == ":method"]
        if methods and method not in methods:
            continue
        if any(h.get("present_match") and h["name"] not in headers for h in match.get("headers", [])):
            continue
        return route
    raise AssertionError(f"no route for {method} {path} on {listener}")


def local_reply(route: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    reply = route["direct_response"]
    return reply["status"], json.loads(reply["body"]["inline_string"])


def sidecar_metadata(route: dict[str, Any]) -> dict[str, str] | None:
    """The gRPC metadata Envoy sends the sidecar on this route; None when the sidecar is not called."""
    config = route.get("typed_per_filter_config", {}).get("envoy.filters.http.ext_proc")
    if config is None:
        return None
    return {h["key"]: h["value"] for h in config["config"]["overrides"]["grpc_initial_metadata"]}


def cluster(resources: Resources, name: str) -> dict[str, Any]:
    return plain(to_dict(resources.named(CLUSTER)[name].message))


def listener(resources: Resources, name: str) -> dict[str, Any]:
    return plain(to_dict(resources.named(LISTENER)[f"listener/{name}"].message))


def sidecar_data(resources: Resources, name: str) -> dict[str, Any]:
    return plain(to_dict(resources.named(SIDECAR)[f"sidecar/{name}"].message))["value"]
