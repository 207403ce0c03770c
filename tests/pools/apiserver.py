"""A hand-written stand-in for the Kubernetes API server's EndpointSlice endpoints.

No API server can run here (no etcd, no kube-apiserver binary, no cluster), so this serves
what the real one serves for ``GET /apis/discovery.k8s.io/v1/namespaces/NS/endpointslices``:
a list (``EndpointSliceList`` with a ``resourceVersion``) and, with ``watch=true``, a chunked
stream of JSON watch events from the given ``resourceVersion`` on, in the wire format of
``kubernetes`` (``{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": ...}``).
The test changes slices with ``put`` and ``delete``; open watches see each change at once.
It can also expire every watch (``ERROR 410 Gone``, as after compaction), refuse a namespace
(403, as RBAC does), and cut every connection (an API server restart).
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

SERVICE_LABEL = "kubernetes.io/service-name"
PREFIX = "/apis/discovery.k8s.io/v1/namespaces/"


def endpoint_slice(
    name: str,
    service: str,
    endpoints: list[tuple[str, bool | None]],
    *,
    port: int = 8100,
    port_name: str = "http",
    ports: list[dict[str, Any]] | None = None,
    address_type: str = "IPv4",
) -> dict[str, Any]:
    """An EndpointSlice as the EndpointSlice controller writes it; ``ready`` None leaves the condition unset."""
    return {
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {
            "name": name,
            "labels": {
                SERVICE_LABEL: service,
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": address_type,
        "endpoints": [
            {
                "addresses": [ip],
                "conditions": ({} if ready is None else {"ready": ready, "serving": ready, "terminating": not ready}),
                "targetRef": {"kind": "Pod", "name": f"pod-{ip}"},
            }
            for ip, ready in endpoints
        ],
        "ports": ports if ports is not None else [{"name": port_name, "port": port, "protocol": "TCP"}],
    }


class FakeApiServer:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = 100
        self._objects: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) -> slice
        self._events: list[tuple[int, str, str, dict[str, Any]]] = []  # (version, namespace, type, object)
        self._expired_below = 0  # watches from an older version get 410
        self._generation = 0  # bumped to end every open watch
        self.forbidden: set[str] = set()  # namespaces answered 403
        self.requests: list[str] = []  # "list NS" / "watch NS from V"
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if not url.path.startswith(PREFIX) or not url.path.endswith("/endpointslices"):
                    return self._json(404, {"kind": "Status", "code": 404, "message": f"no route {url.path}"})
                namespace = url.path[len(PREFIX) :].split("/")[0]
                if namespace in outer.forbidden:
                    return self._json(
                        403,
                        {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "reason": "Forbidden",
                            "code": 403,
                            "message": (
                                'endpointslices.discovery.k8s.io is forbidden: User "system:serviceaccount:x:y" '
                                'cannot list resource "endpointslices" in API group "discovery.k8s.io" in the '
                                f'namespace "{namespace}"'
                            ),
                        },
                    )
                selector = query.get("labelSelector", "")
                if query.get("watch") in ("true", "1"):
                    return outer._watch(self, namespace, selector, int(query.get("resourceVersion") or 0))
                outer.requests.append(f"list {namespace}")
                with outer._cond:
                    items = [
                        copy.deepcopy(o)
                        for (ns, _), o in sorted(outer._objects.items())
                        if ns == namespace and _matches(o, selector)
                    ]
                    version = outer._version
                self._json(
                    200,
                    {
                        "kind": "EndpointSliceList",
                        "apiVersion": "discovery.k8s.io/v1",
                        "metadata": {"resourceVersion": str(version)},
                        "items": items,
                    },
                )

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

    # -- what a test does

    def put(self, namespace: str, obj: dict[str, Any]) -> None:
        """Create or replace a slice (ADDED or MODIFIED to every watch)."""
        with self._cond:
            key = (namespace, obj["metadata"]["name"])
            kind = "MODIFIED" if key in self._objects else "ADDED"
            self._version += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["namespace"] = namespace
            obj["metadata"]["resourceVersion"] = str(self._version)
            self._objects[key] = obj
            self._events.append((self._version, namespace, kind, obj))
            self._cond.notify_all()

    def delete(self, namespace: str, name: str) -> None:
        with self._cond:
            obj = self._objects.pop((namespace, name))
            self._version += 1
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._version)}}
            self._events.append((self._version, namespace, "DELETED", obj))
            self._cond.notify_all()

    def expire(self) -> None:
        """Every open watch gets ERROR 410 Gone, and so does a watch from any version before the
        current one (as after etcd compaction); a list gives the current version, which works."""
        with self._cond:
            self._version += 1  # others wrote meanwhile: compaction passed every version a watch holds
            self._expired_below = self._version
            self._generation += 1
            self._cond.notify_all()

    def end_watches(self) -> None:
        """Every open watch ends cleanly, as when the API server restarts or its watch timeout passes."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def watches(self) -> int:
        return sum(1 for r in self.requests if r.startswith("watch"))

    def lists(self) -> int:
        return sum(1 for r in self.requests if r.startswith("list"))

    def kubeconfig(self, directory: Path, namespace: str = "default") -> Path:
        return write_kubeconfig(directory, self.url, namespace)

    def stop(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # -- the watch stream

    def _watch(self, handler: BaseHTTPRequestHandler, namespace: str, selector: str, since: int) -> None:
        with self._cond:
            # Counted and tied to the current generation at once: a test that saw the watch
            # counted and then ends every watch ends this one (else it could start after the end).
            self.requests.append(f"watch {namespace} from {since}")
            generation = self._generation
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()

        def send(event: dict[str, Any]) -> None:
            data = json.dumps(event).encode() + b"\n"
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            handler.wfile.flush()

        with self._cond:
            if since < self._expired_below:
                gone = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "Expired",
                    "code": 410,
                    "message": f"too old resource version: {since}",
                }
                pending: list[dict[str, Any]] = [{"type": "ERROR", "object": gone}]
            else:
                pending = []
        try:
            while True:
                for event in pending:
                    send(event)
                if pending and pending[-1]["type"] == "ERROR":
                    break
                with self._cond:
                    self._cond.wait_for(
                        # since is bound now: the loop moves it on between waits.
                        lambda since=since: (
                            self._generation != generation or self._events[-1:] and self._events[-1][0] > since
                        ),
                        timeout=1,
                    )
                    if self._generation != generation:
                        if self._expired_below > since:
                            gone = {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "status": "Failure",
                                "reason": "Expired",
                                "code": 410,
                                "message": "too old resource version",
                            }
                            pending = [{"type": "ERROR", "object": gone}]
                            continue
                        break
                    fresh = [(v, ns, t, o) for v, ns, t, o in self._events if v > since]
                if fresh:
                    since = fresh[-1][0]
                pending = [
                    {"type": t, "object": o} for v, ns, t, o in fresh if ns == namespace and _matches(o, selector)
                ]
            handler.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        handler.close_connection = True


def _matches(obj: dict[str, Any], selector: str) -> bool:
    if not selector:
        return True
    key, _, value = selector.partition("=")
    return (obj.get("metadata", {}).get("labels") or {}).get(key) == value


__all__ = ["FakeApiServer", "endpoint_slice"]


def write_kubeconfig(directory: Path, server: str, namespace: str) -> Path:
    """A kubeconfig whose one context points the kubernetes client at ``server`` (token unchecked)."""
    path = directory / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "test",
                "clusters": [{"name": "test", "cluster": {"server": server}}],
                "users": [{"name": "test", "user": {"token": "not-checked"}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
            }
        )
    )
    return path
