"""The status port: ``GET /status`` (JSON), ``GET /metrics`` (Prometheus), ``GET /healthz``
(readiness: a version is served) and ``GET /livez`` (liveness: edits are still read)."""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST


def _loopback(host: str) -> bool:
    address = ipaddress.ip_address(host.split("%", 1)[0])
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 on a dual-stack socket
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


class StatusServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        status: Callable[[], dict[str, Any]],
        metrics: Callable[[], bytes],
        serving: Callable[[], bool],
        alive: Callable[[], bool],
        not_ready: str = "no valid config yet",
        not_alive: str = "config watch stopped: edits are no longer read",
        more: Callable[[str], tuple[int, str, bytes] | None] | None = None,
        loopback_only: tuple[str, ...] = (),
    ) -> None:
        """``more(path)`` answers other paths as (status, content type, body), or None for 404.
        Paths under a ``loopback_only`` prefix are answered to this host's own callers alone
        (403 to others): what they hold may name more than the rest of the port says."""

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.split("?", 1)[0]
                if path.startswith(loopback_only) and not _loopback(self.client_address[0]):
                    detail = f"{path} is answered on this host only (loopback); reach it through ssh or kubectl"
                    self._send(403, "application/json", json.dumps({"detail": detail}).encode() + b"\n")
                elif path == "/status":
                    self._send(200, "application/json", json.dumps(status(), indent=2).encode() + b"\n")
                elif path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, metrics())
                elif path == "/healthz":
                    # Ready once a version is served: an Envoy connecting now gets a config.
                    ok = serving()
                    self._send(200 if ok else 503, "text/plain", b"serving\n" if ok else not_ready.encode() + b"\n")
                elif path == "/livez":
                    # A process that no longer reads edits would serve a stale config forever:
                    # restarting it is the cure, so liveness fails.
                    ok = alive()
                    self._send(200 if ok else 503, "text/plain", b"alive\n" if ok else not_alive.encode() + b"\n")
                elif more is not None and (answer := more(path)) is not None:
                    self._send(*answer)
                else:
                    self._send(404, "application/json", b'{"detail":"try /status, /metrics, /healthz or /livez"}\n')

            def _send(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="status-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()
