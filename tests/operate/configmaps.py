"""A hand-written stand-in for the Kubernetes API server's ConfigMap endpoints, and a kubelet.

No API server can run here (no etcd, no kube-apiserver binary, no cluster), so this serves what
the real one serves for what ``vllm-sr config rollback --configmap`` asks through the
``kubernetes`` client: ``GET /api/v1/namespaces/NS/configmaps/NAME`` (the ConfigMap with its
``resourceVersion``) and ``PATCH`` of it with ``application/merge-patch+json`` (a JSON merge
patch; a ``metadata.resourceVersion`` that is not the current one is 409 Conflict, as the real
server's optimistic concurrency answers). A namespace in ``forbidden`` is answered 403 with the
Status body RBAC gives. Each accepted patch is handed to ``on_patch``, which plays the kubelet:
the test writes the mounted file from it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.pools.apiserver import write_kubeconfig

PREFIX = "/api/v1/namespaces/"


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386: a JSON merge patch applied to ``target``."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


class FakeConfigMaps:
    def __init__(self, on_patch: Callable[[dict[str, str]], None] = lambda data: None) -> None:
        self._lock = threading.Lock()
        self._version = 500
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.forbidden: set[str] = set()
        self.requests: list[str] = []  # "GET NS/NAME", "PATCH NS/NAME content-type"
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _target(self) -> tuple[str, str] | None:
                parts = self.path.split("?", 1)[0].removeprefix(PREFIX).split("/")
                if not self.path.startswith(PREFIX) or len(parts) != 3 or parts[1] != "configmaps":
                    return None
                return parts[0], parts[2]

            def do_GET(self) -> None:  # noqa: N802
                key = self._target()
                outer.requests.append(f"GET {'/'.join(key or ('?', '?'))}")
                if self._refused(key):
                    return
                assert key is not None
                with outer._lock:
                    self._json(200, outer.objects[key])

            def do_PATCH(self) -> None:  # noqa: N802
                key = self._target()
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                outer.requests.append(f"PATCH {'/'.join(key or ('?', '?'))} {self.headers.get('content-type')}")
                if self._refused(key):
                    return
                assert key is not None
                if self.headers.get("content-type") != "application/merge-patch+json":
                    return self._status(415, "UnsupportedMediaType", "this stand-in reads merge patches only")
                with outer._lock:
                    current = outer.objects[key]
                    wanted = (body.get("metadata") or {}).get("resourceVersion")
                    if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                        return self._status(
                            409,
                            "Conflict",
                            f'Operation cannot be fulfilled on configmaps "{key[1]}": the object has been modified; '
                            "please apply your changes to the latest version and try again",
                        )
                    outer._version += 1
                    merged = _merge(current, body)
                    merged["metadata"]["resourceVersion"] = str(outer._version)
                    outer.objects[key] = merged
                    self._json(200, merged)
                on_patch(dict(merged.get("data") or {}))

            def _refused(self, key: tuple[str, str] | None) -> bool:
                if key is None or (key not in outer.objects and key[0] not in outer.forbidden):
                    self._status(404, "NotFound", f'configmaps "{key[1] if key else "?"}" not found')
                    return True
                if key[0] in outer.forbidden:
                    verb = "get" if self.command == "GET" else "patch"
                    self._status(
                        403,
                        "Forbidden",
                        f'configmaps "{key[1]}" is forbidden: User "system:serviceaccount:ops:viewer" cannot '
                        f'{verb} resource "configmaps" in API group "" in the namespace "{key[0]}"',
                    )
                    return True
                return False

            def _status(self, code: int, reason: str, message: str) -> None:
                status = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
                self._json(code, status | {"reason": reason, "code": code, "message": message})

            def _json(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def put(self, namespace: str, name: str, data: dict[str, str]) -> None:
        with self._lock:
            self._version += 1
            self.objects[(namespace, name)] = {
                "kind": "ConfigMap",
                "apiVersion": "v1",
                "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(self._version)},
                "data": dict(data),
            }

    def data(self, namespace: str, name: str) -> dict[str, str]:
        with self._lock:
            return dict(self.objects[(namespace, name)]["data"])

    def kubeconfig(self, directory: Path, namespace: str) -> Path:
        return write_kubeconfig(directory, self.url, namespace)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
