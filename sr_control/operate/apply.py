"""Putting a config live and following it onto every node: ``config apply`` and ``config rollback``.

A config goes live by the one path the control plane has: its watched file, replaced whole
(a temporary file renamed over it, so it is read at the next poll and never half written).
Then every node's ACK is followed on the status port until each holds the new version, or an
Envoy refuses it.

    old = write_live(path, text)                        # the text it replaced
    outcome = follow(xds, before, on_node=print)        # "ok", "refused", "invalid" or "timeout"
"""

from __future__ import annotations

import fcntl
import hashlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sr_control.config.migrate import write_atomic
from sr_control.operate.live import Unreachable, get, get_json
from sr_control.operate.status import judge_node

# How long to wait for the control plane to read the file, and then for every node's ACK.
FOLLOW_TIMEOUT_S = 60.0


@dataclass
class Outcome:
    result: str  # ok, refused, invalid, timeout
    version: str | None = None  # the version served at the end
    refused_by: dict[str, Any] | None = None  # the node that NACKed, with Envoy's error
    problems: list[dict[str, Any]] = field(default_factory=list)
    behind: list[str] = field(default_factory=list)  # nodes not in step at a timeout
    nodes: list[dict[str, Any]] = field(default_factory=list)  # each node as it took the version


@contextmanager
def edit_lock(path: Path) -> Iterator[None]:
    """One apply or rollback at a time on this config file (on this host)."""
    lock = path.parent / f".{path.name}.vllm-sr-lock"
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pending_edit(xds: str, live: str, path: Path) -> bool:
    """True when the watched file differs from the live version's source: someone saved an edit
    that is not (or not yet) live, and writing over it would lose it. Raises Unreachable when
    the control plane will not show the source to this caller (not on its host)."""
    status, body = get(xds, f"/versions/{live}")
    if status == 403:
        raise Unreachable(f"{xds} serves a version's source text to loopback only: give --xds 127.0.0.1:PORT")
    if status != 200:
        return False  # the source is not kept: nothing to compare with
    try:
        return digest(path.read_text(encoding="utf-8")) != digest(body.decode("utf-8"))
    except OSError:
        return False


def write_live(path: Path, text: str) -> str | None:
    """Replace the watched file with ``text``; returns the text it held (None when there was none)."""
    try:
        old: str | None = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        old = None
    write_atomic(path, text)
    return old


def follow(
    xds: str,
    before: dict[str, Any],
    *,
    timeout: float = FOLLOW_TIMEOUT_S,
    on_node: Callable[[dict[str, Any]], None] = lambda node: None,
    poll: float = 0.1,
) -> Outcome:
    """After a write: wait for the control plane's next reload (``before`` is its /status from
    before the write), then for every node to ACK the version served or for a NACK of it."""
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    nodes: list[dict[str, Any]] = []
    status = before
    while time.monotonic() < deadline:
        try:
            status = get_json(xds, "/status")
        except Unreachable:
            time.sleep(poll)
            continue
        last = status.get("last_reload")
        if last == before.get("last_reload"):
            time.sleep(poll)  # not read yet
            continue
        if last is not None and last.get("result") in ("invalid", "unreadable", "error"):
            problems = (status.get("last_error") or {}).get("problems") or []
            return Outcome("invalid", status.get("version"), problems=problems)
        want = status.get("type_versions") or {}
        judged = [judge_node(n, want, []) for n in status.get("nodes", [])]
        for node in judged:
            nack = node["nack"]
            if nack is not None and nack["version"] == want.get(nack["type"]):
                return Outcome("refused", status.get("version"), refused_by=node, nodes=nodes)
            if node["state"] == "in_step" and node["id"] not in seen:
                seen.add(node["id"])
                node["version"] = status.get("version")
                nodes.append(node)
                on_node(node)
        if judged and all(n["state"] == "in_step" for n in judged):
            return Outcome("ok", status.get("version"), nodes=nodes)
        time.sleep(poll)
    judged = [judge_node(n, status.get("type_versions") or {}, []) for n in status.get("nodes", [])]
    return Outcome(
        "timeout", status.get("version"), behind=[n["id"] for n in judged if n["state"] != "in_step"], nodes=nodes
    )


__all__ = ["FOLLOW_TIMEOUT_S", "Outcome", "digest", "edit_lock", "follow", "pending_edit", "write_live"]
