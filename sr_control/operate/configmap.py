"""Putting a kept version back when the config is a Kubernetes ConfigMap's.

In a cluster the control plane watches a ConfigMap's key mounted as a file; writing that file
would be undone at the kubelet's next sync, so a rollback changes the ConfigMap itself, and the
kubelet then rewrites the file (within its sync period, about a minute), which the control
plane reads as any edit. With the ``kubernetes`` client and RBAC to patch the ConfigMap:

    patched = put_back(api_client, "vllm-sr", "vllm-sr-config", "config.yaml", text)

a read (the key must be there) and a JSON merge patch of that one key, guarded by the
resourceVersion read (another edit in between is refused with 409, not overwritten). Without
the rights, or without a client, the patch is saved (``save_patch``) and ``kubectl_command`` is
what the operator runs instead.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

# Connect and read timeouts for the two API calls, in seconds.
TIMEOUT_S = (5.0, 30.0)


class ConfigMapRefused(Exception):
    """The API server refused (or could not be asked): the message says why, in its words."""


def kubeconfig_path(given: Path | None) -> Path | None:
    """The kubeconfig to use: ``given``, else $KUBECONFIG's first file, else ~/.kube/config when
    it exists; None means the pod's service account (in a cluster) or no client at all."""
    if given is not None:
        return given
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if env:
        return Path(env)
    home = Path.home() / ".kube" / "config"
    return home if home.is_file() else None


def _reason(exc: Exception) -> str:
    """The API server's own message (its Status body), else the exception's."""
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    try:
        message = json.loads(body)["message"] if body else None
    except (ValueError, KeyError, TypeError):
        message = None
    text = message or " ".join(str(exc).split()) or type(exc).__name__
    return f"{status} {text}" if status else text


def put_back(api_client: Any, namespace: str, name: str, key: str, text: str) -> bool:
    """Set ``key`` of ConfigMap ``namespace/name`` to ``text``; False when it held it already
    (nothing patched). Raises ConfigMapRefused naming why (no such ConfigMap or key, RBAC, a
    conflicting edit)."""
    from kubernetes.client import CoreV1Api  # imported only where a rollback patches a ConfigMap

    api = CoreV1Api(api_client)
    try:
        # Plain JSON (_preload_content=False): a few fields are read, and it is what a test serves.
        # With _preload_content=False the client returns the raw urllib3 response, not the
        # V1ConfigMap its annotations promise.
        raw: Any = api.read_namespaced_config_map(name, namespace, _preload_content=False, _request_timeout=TIMEOUT_S)
        current = json.loads(raw.data)
        held = (current.get("data") or {}).get(key)
        if held is None:
            raise ConfigMapRefused(f"ConfigMap {namespace}/{name} has no key {key!r} (give --key)")
        if held == text:
            return False
        patch = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "data": {key: text}}
        api.patch_namespaced_config_map(
            name,
            namespace,
            patch,
            _content_type="application/merge-patch+json",
            _preload_content=False,
            _request_timeout=TIMEOUT_S,
        )
        return True
    except ConfigMapRefused:
        raise
    except Exception as exc:  # noqa: BLE001 - the client fails in many ways (HTTP, TLS, sockets); each is one line
        raise ConfigMapRefused(_reason(exc)) from None


def save_patch(directory: Path, version: str, key: str, text: str) -> Path:
    """A merge patch that sets ``key`` to ``text``, saved for ``kubectl patch --patch-file``."""
    path = directory / f"vllm-sr-{version}.patch.json"
    path.write_text(json.dumps({"data": {key: text}}, indent=1) + "\n", encoding="utf-8")
    return path


def kubectl_command(namespace: str, name: str, patch: Path) -> str:
    """The command that applies ``patch`` to the ConfigMap, keeping its other keys."""
    return (
        f"kubectl -n {shlex.quote(namespace)} patch configmap {shlex.quote(name)} "
        f"--type merge --patch-file {shlex.quote(str(patch))}"
    )


__all__ = ["ConfigMapRefused", "kubeconfig_path", "kubectl_command", "put_back", "save_patch"]
