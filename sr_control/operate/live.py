"""Reading the status ports of a running stack: the control plane's and the sidecars'."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# The control plane's and the sidecar's default status ports (vllm-sr serve, docs/xds/serve.md).
XDS_STATUS = "127.0.0.1:18001"
SIDECAR_STATUS = "127.0.0.1:18081"
# 4.0-only forms counted beside how each request went on; these two are not forms.
_NOT_FORMS = frozenset({"passthrough", "convert"})


class Unreachable(Exception):
    """A status port did not answer; the message says which and why."""


def base_url(address: str) -> str:
    """HOST:PORT (or a URL) as an http:// base URL without a trailing slash."""
    address = address.strip().rstrip("/")
    return address if "://" in address else f"http://{address}"


def get(address: str, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    url = base_url(address) + path
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return int(reply.status), reply.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unreachable(f"{url}: {reason}") from None


def get_json(address: str, path: str, timeout: float = 5.0) -> Any:
    status, body = get(address, path, timeout)
    if status != 200:
        raise Unreachable(f"{base_url(address)}{path}: HTTP {status}")
    try:
        return json.loads(body)
    except ValueError:
        raise Unreachable(f"{base_url(address)}{path}: not JSON") from None


def get_text(address: str, path: str, timeout: float = 5.0) -> str:
    status, body = get(address, path, timeout)
    if status != 200:
        raise Unreachable(f"{base_url(address)}{path}: HTTP {status}")
    return body.decode("utf-8", "replace")


def legacy_forms(metrics_text: str) -> dict[str, dict[str, int]]:
    """Listener -> 4.0-only form -> requests that used it, from a sidecar's ``/metrics``."""
    out: dict[str, dict[str, int]] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "vsr_systemone_listener_diagnostics":
            continue
        for sample in family.samples:
            form = sample.labels.get("form", "")
            if sample.name.endswith("_total") and form not in _NOT_FORMS:
                forms = out.setdefault(sample.labels.get("listener", ""), {})
                forms[form] = forms.get(form, 0) + int(sample.value)
    return out


__all__ = ["SIDECAR_STATUS", "XDS_STATUS", "Unreachable", "base_url", "get", "get_json", "get_text", "legacy_forms"]
