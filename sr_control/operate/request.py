"""``vllm-sr request``: one request through a listener, and what came back.

reply = send("http://127.0.0.1:8801", body)        # the path from the body's kind
summary = summarize(reply)                           # answers, member, version, request id
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


def summarize(reply: Reply) -> dict[str, Any]:
    doc = reply.json()
    meta: dict[str, Any] = {}
    if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict):
        meta = doc["metadata"]
    vsr = {k: v for k, v in reply.headers.items() if k.startswith("x-vsr-")} | {
        k: v for k, v in meta.items() if str(k).startswith("x-vsr-")
    }
    member = next((v for k, v in vsr.items() if "member" in k), None)
    out: dict[str, Any] = {
        "url": reply.url,
        "status": reply.status,
        "request_id": reply.headers.get("x-request-id") or meta.get("request_id") or doc_id(doc),
        "config_version": vsr.get("x-vsr-config-version"),
        "member": member,
        "model": doc.get("model") if isinstance(doc, dict) else None,
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


def render(summary: dict[str, Any]) -> str:
    lines = [
        f"{summary['status']} from {summary['url']}",
        f"  request id      {summary['request_id'] or '-'}",
        f"  config version  {summary['config_version'] or '-'}",
        f"  model           {summary['model'] or '-'}",
        f"  member          {summary['member'] or '-'}",
    ]
    for k, v in sorted(summary["vsr"].items()):
        if k not in ("x-vsr-config-version",) and "member" not in k:
            lines.append(f"  {k:<15} {v}")
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


__all__ = ["Reply", "path_for", "render", "send", "summarize"]
