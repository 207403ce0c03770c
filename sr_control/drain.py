"""Stopping Envoy without cutting a request: its admin API's listener drain, then a wait until
the requests it holds have finished.

Two callers: ``vllm-sr serve`` stopping its local Envoy (admin on a Unix socket, listeners closed
at once), and the chart's Envoy pods, whose preStop hook runs ``vllm-sr envoy drain`` against the
admin on loopback (docs/deploy/shutdown.md). There the drain is graceful: for ``announce_s``
Envoy still accepts connections, from proxies that have not yet seen the pod leave its Service,
and (run with ``--drain-strategy immediate``) closes every connection after its current response
(HTTP/1.1 ``Connection: close``, HTTP/2 GOAWAY); then its listeners are closed, and only the
requests already in flight remain. The announcement is ours to end (``skip_exit``), so Envoy's
``--drain-time-s`` stays free for what else it bounds: how long a listener that an LDS update
replaces keeps its connections.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable


def admin_request(admin: str, path: str, method: str = "GET", timeout: float = 2) -> tuple[int, bytes]:
    """Envoy's admin at ``HOST:PORT`` or ``unix:PATH``: (status, body), or (0, b"") when nothing answers."""
    conn: http.client.HTTPConnection
    if admin.startswith("unix:"):
        conn = _UnixHTTP(admin.removeprefix("unix:"), timeout)
    else:
        host, _, port = admin.rpartition(":")
        conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
    try:
        conn.request(method, path, headers={"host": "envoy"})
        reply = conn.getresponse()
        return reply.status, reply.read()
    except OSError:
        return 0, b""
    finally:
        conn.close()


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("envoy", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def active_requests(admin: str) -> int:
    """Requests Envoy's listeners hold now: every HTTP connection manager's ``downstream_rq_active``
    but the admin's own (this very call is one)."""
    status, body = admin_request(admin, "/stats?format=json&filter=downstream_rq_active", timeout=1)
    try:
        stats = json.loads(body).get("stats", []) if status == 200 else []
    except ValueError:
        return 0
    return sum(
        int(s.get("value", 0))
        for s in stats
        if s.get("name", "").startswith("http.") and not s["name"].startswith("http.admin.")
    )


def start_drain(admin: str, graceful: bool = True) -> bool:
    """Ask Envoy to drain its listeners: gracefully (connections are told to close, the listeners
    stay open until ``close_listeners``) or at once. False when the admin did not answer."""
    path = "/drain_listeners?graceful&skip_exit" if graceful else "/drain_listeners"
    return admin_request(admin, path, method="POST")[0] == 200


def close_listeners(admin: str) -> bool:
    """Envoy stops accepting connections; the ones it has keep their requests in flight."""
    return admin_request(admin, "/drain_listeners", method="POST")[0] == 200


def wait_idle(
    admin: str,
    *,
    timeout_s: float,
    poll_s: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Wait until no request is active or ``timeout_s`` has passed; the requests still active."""
    deadline = clock() + timeout_s
    while (active := active_requests(admin)) > 0 and clock() < deadline:
        sleep(poll_s)
    return active


def drain(admin: str, *, timeout_s: float, announce_s: float = 0, graceful: bool = True) -> int | None:
    """Drain Envoy's listeners and wait for its requests: ``announce_s`` seconds of graceful drain,
    the listeners closed, then until no request is active or ``timeout_s`` more seconds have
    passed. Returns the requests still active at the end (0: every one finished), or None when
    the admin did not answer (Envoy is gone)."""
    if not start_drain(admin, graceful):
        return None
    if graceful:
        # Envoy still accepts connections meanwhile: other nodes' proxies may still send them.
        time.sleep(announce_s)
        close_listeners(admin)
    return wait_idle(admin, timeout_s=timeout_s)


def wait_gone(
    admin: str,
    *,
    timeout_s: float,
    poll_s: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Wait until Envoy's admin stops answering (Envoy has exited) or ``timeout_s`` passes; True
    when it is gone. The sidecar's preStop: Envoy still calls the sidecar for the requests it drains."""
    deadline = clock() + timeout_s
    while admin_request(admin, "/ready", timeout=1)[0] != 0:
        if clock() >= deadline:
            return False
        sleep(poll_s)
    return True


__all__ = ["active_requests", "admin_request", "close_listeners", "drain", "start_drain", "wait_gone", "wait_idle"]
