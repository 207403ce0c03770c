"""The chart as Helm sees it, through helm-python-sdk (Helm 4 as a library; no helm binary)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "vllm-sr"
RELEASE, NAMESPACE = "vsr", "ml"


def render(values: dict[str, Any] | None = None) -> dict[str, str]:
    """Template path -> manifest text, as `helm template vsr deploy/helm/vllm-sr -n ml` writes them."""
    with helm.Chart.load(CHART) as chart:
        return chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)


def objects(rendered: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        out += [doc for doc in yaml.safe_load_all(text) if doc]
    return out


def find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objs:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"no {kind} {name} among {[(o['kind'], o['metadata']['name']) for o in objs]}")


def container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    (c,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c


def config_text(objs: list[dict[str, Any]]) -> str:
    return find(objs, "ConfigMap", f"{RELEASE}-vllm-sr-config")["data"]["config.yaml"]


__all__ = ["CHART", "NAMESPACE", "RELEASE", "ROOT", "config_text", "container", "find", "objects", "render"]
