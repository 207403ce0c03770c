"""Compiled resources as files: what ``vllm-sr config compile FILE -o DIR`` writes.

listeners.yaml routes.yaml clusters.yaml sidecar.yaml   one DiscoveryResponse each, as served
bootstrap.yaml                                          Envoy knowing only the control plane
envoy-static.yaml                                       everything inline
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from sr_control.compiler.protos import PUSH_ORDER, SIDECAR, TYPE_NAMES, Bootstrap, to_dict
from sr_control.compiler.resources import Resources

# Fields of type google.protobuf.Struct in what the compiler emits: a Struct is a map and keeps
# no key order of its own, so its keys are written sorted to keep the files the same run to run.
_STRUCT_FIELDS = frozenset({"json_format"})


def plain(node: Any) -> Any:
    """MessageToDict output as plain dicts (its Any values are OrderedDicts), for YAML."""
    if isinstance(node, dict):
        return {k: _sorted(v) if k in _STRUCT_FIELDS else plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    return node


def _sorted(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _sorted(node[k]) for k in sorted(node)}
    if isinstance(node, list):
        return [_sorted(v) for v in node]
    return node


def as_discovery_response(resources: Resources, type_url: str) -> dict[str, Any]:
    """One type as a node receives it (state of the world): version, type and resources."""
    items = []
    for r in resources[type_url]:
        item = {"@type": r.packed.type_url, **to_dict(r.message)}
        if type_url == SIDECAR:
            item["value"] = _sorted(item["value"])  # a Struct keeps no key order of its own
        items.append(item)
    return {"version_info": resources.type_version(type_url), "type_url": type_url, "resources": items}


def to_yaml(data: Any) -> str:
    return yaml.safe_dump(plain(data), sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


def documents(resources: Resources, bootstrap: Bootstrap, static: Bootstrap) -> dict[str, str]:
    """File name -> YAML text, in a fixed order."""
    out = {f"{TYPE_NAMES[t]}.yaml": to_yaml(as_discovery_response(resources, t)) for t in PUSH_ORDER}
    out["bootstrap.yaml"] = to_yaml(to_dict(bootstrap))
    out["envoy-static.yaml"] = to_yaml(to_dict(static))
    return out


def write(directory: Path, files: dict[str, str]) -> list[Path]:
    """Write each file atomically (a reader never sees half a file); returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        target = directory / name
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
        written.append(target)
    return written
