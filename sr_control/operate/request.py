"""``vllm-sr request``: one request through a listener, and what came back.

reply = send("http://127.0.0.1:8801", body)        # the path from the body's kind
summary = summarize(reply, plane)                    # answers, member, versions, request id

Two versions, named apart: the answer's ``x-vsr-config-version`` is the *listener version* (the
version of that listener's part of the config, its sidecar data); the control plane's ``/status``
(``plane``) maps it to the whole *config version* when it is the live one's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

SYSTEMONE_PATH = "/v1/systemone"
CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    url: str
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def path_for(body: Any) -> str:
    """A System One request asks ``questions`` (or 4.0 ``states``); anything else is an LLM chat."""
    if isinstance(body, dict) and ("questions" in body or "states" in body):
        return SYSTEMONE_PATH
    return CHAT_PATH


def send(
    listener: str, body: bytes, *, path: str | None = None, headers: dict[str, str] | None = None, timeout: float = 60
) -> Reply:
    """POST ``body`` to the listener; raises httpx.HTTPError when it cannot be reached."""
    base = listener.rstrip("/")
    if "://" not in base:
        base = f"http://{base}"
    if path is None:
        try:
            path = path_for(json.loads(body))
        except ValueError:
            path = SYSTEMONE_PATH
    url = base + path
    reply = httpx.post(
        url, content=body, headers={"content-type": "application/json", **(headers or {})}, timeout=timeout
    )
    return Reply(url, reply.status_code, {k.lower(): v for k, v in reply.headers.items()}, reply.content)


MEMBER_HEADER = "x-vsr-member"
LISTENER_VERSION_HEADER = "x-vsr-config-version"


def config_version(listener_version: str | None, plane: dict[str, Any] | None) -> dict[str, Any]:
    """Which listener and live config version a listener version belongs to, from the control
    plane's /status; ``live`` False when it is no listener's live version (an edit since)."""
    if plane is None or listener_version is None:
        return {"listener": None, "config_version": None, "live": None}
    for name, version in (plane.get("listener_versions") or {}).items():
        if version == listener_version:
            return {"listener": name, "config_version": plane.get("version"), "live": True}
    return {"listener": None, "config_version": None, "live": False}


def summarize(reply: Reply, plane: dict[str, Any] | None = None) -> dict[str, Any]:
    """What came back; ``plane``: the control plane's /status (None when it was not read)."""
    doc = reply.json()
    meta: dict[str, Any] = {}
    if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict):
        meta = doc["metadata"]
    vsr = {k: v for k, v in reply.headers.items() if k.startswith("x-vsr-")} | {
        k: v for k, v in meta.items() if str(k).startswith("x-vsr-")
    }
    listener_version = vsr.get(LISTENER_VERSION_HEADER)
    out: dict[str, Any] = {
        "url": reply.url,
        "status": reply.status,
        "request_id": reply.headers.get("x-request-id") or meta.get("request_id") or doc_id(doc),
        "member": vsr.get(MEMBER_HEADER),
        "model": doc.get("model") if isinstance(doc, dict) else None,
        "listener_version": listener_version,
        **config_version(listener_version, plane),
        "vsr": vsr,
    }
    if isinstance(doc, dict) and "answers" in doc:
        out["answers"] = doc["answers"]
    elif isinstance(doc, dict) and "choices" in doc:
        out["choices"] = [c.get("message", {}).get("content") for c in doc["choices"] if isinstance(c, dict)]
    elif isinstance(doc, dict) and ("error" in doc or "detail" in doc):
        out["error"] = doc.get("error", doc.get("detail"))
    else:
        out["body"] = reply.body.decode("utf-8", "replace")[:2000]
    return out


def doc_id(doc: Any) -> str | None:
    return doc.get("id") if isinstance(doc, dict) and isinstance(doc.get("id"), str) else None


def render(summary: dict[str, Any], xds: str = "") -> str:
    """``xds``: the control plane's status port that was asked for the config version."""
    if summary["live"]:
        config = f"{summary['config_version']}  (live on the control plane {xds}, listener {summary['listener']})"
    elif summary["live"] is False:
        config = f"-  (not a listener version live on the control plane {xds}: an edit since, or another plane)"
    elif summary["listener_version"]:
        config = f"-  (the control plane {xds} did not answer; --xds names it)"
    else:
        config = "-"
    lines = [
        f"{summary['status']} from {summary['url']}",
        f"  request id        {summary['request_id'] or '-'}",
        f"  model             {summary['model'] or '-'}",
        f"  member            {summary['member'] or '-'}",
        f"  listener version  {summary['listener_version'] or '-'}  (x-vsr-config-version: this listener's part)",
        f"  config version    {config}",
    ]
    for k, v in sorted(summary["vsr"].items()):
        if k not in (LISTENER_VERSION_HEADER, MEMBER_HEADER):
            lines.append(f"  {k:<17} {v}")
    if "answers" in summary:
        lines.append("answers:")
        for name, answer in summary["answers"].items():
            if isinstance(answer, dict):
                kind = answer.get("type", "?")
                value = {k: v for k, v in answer.items() if k != "type"}
                shown = ", ".join(f"{k}={_short(v)}" for k, v in value.items())
                lines.append(f"  {name} ({kind}): {shown}")
            else:
                lines.append(f"  {name}: {_short(answer)}")
    elif "choices" in summary:
        lines += ["choices:", *(f"  {c}" for c in summary["choices"])]
    elif "error" in summary:
        lines.append(f"error: {json.dumps(summary['error'])}")
    else:
        lines.append(summary["body"])
    return "\n".join(lines)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    text = json.dumps(value)
    return text if len(text) <= 120 else text[:117] + "..."


# What ``vllm-sr request --format summary`` prints: the tests hold the output to this.
SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "url",
        "status",
        "request_id",
        "member",
        "model",
        "listener_version",
        "listener",
        "config_version",
        "live",
        "vsr",
    ],
    "properties": {
        "status": {"type": "integer"},
        "request_id": {"type": ["string", "null"]},
        "member": {"type": ["string", "null"]},
        "listener_version": {"type": ["string", "null"]},
        "listener": {"type": ["string", "null"]},
        "config_version": {"type": ["string", "null"]},
        "live": {"type": ["boolean", "null"]},
        "vsr": {"type": "object", "additionalProperties": {"type": "string"}},
        "answers": {"type": "object"},
        "choices": {"type": "array"},
    },
}

__all__ = ["SUMMARY_SCHEMA", "Reply", "config_version", "path_for", "render", "send", "summarize"]
