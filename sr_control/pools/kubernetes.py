"""One Service's EndpointSlices, kept current by list-then-watch with the ``kubernetes`` client.

The usual reflector loop: list the slices labelled ``kubernetes.io/service-name=NAME`` (which
gives a resourceVersion), watch from that version, apply each ADDED / MODIFIED / DELETED event,
and watch again from the last version seen when the server ends the watch. A watch whose version
has expired (410 Gone) lists again. Any other failure (API server down, RBAC refusal) is logged
once, shown in ``/status``, and retried with backoff; meanwhile the slices last seen stay in use,
so an API server outage never empties a pool.

The client brings the connection (kubeconfig or in-cluster service account, TLS, tokens); the
objects are read as plain JSON (``_preload_content=False``): ``slices.py`` needs a few fields,
and JSON is what a test's hand-written API server serves.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sr_base import log
from sr_control.pools.slices import Slice

SERVICE_LABEL = "kubernetes.io/service-name"
# The API server ends each watch after this long (plus its own jitter); a read that waits this
# much longer means a dead connection, so the watch is opened again.
WATCH_S = 120
READ_TIMEOUT_S = WATCH_S + 30
CONNECT_TIMEOUT_S = 5
BACKOFF_S = (0.25, 30.0)
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

_log = log.get_logger("vllm_sr.discovery")


class _Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


class SliceWatch:
    def __init__(self, api_client: Any, namespace: str, service: str, on_change: Callable[[], None]) -> None:
        from kubernetes.client import DiscoveryV1Api  # imported only where discovery runs

        self.namespace = namespace
        self.service = service
        self._api = DiscoveryV1Api(api_client)
        self._on_change = on_change
        self._lock = threading.Lock()
        self._slices: dict[str, Slice] = {}
        self.synced = threading.Event()  # the first list is done
        self.error: str | None = None
        self.resource_version: str | None = None
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"slices-{namespace}/{service}", daemon=True)

    def start(self) -> SliceWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        _interrupt(self._response)
        self._thread.join(timeout=2)

    def slices(self) -> list[Slice]:
        with self._lock:
            return list(self._slices.values())

    # -- the loop

    def _run(self) -> None:
        backoff = BACKOFF_S[0]
        gone = 0  # expiries in a row: a server that expires every fresh list is waited out, not hammered
        while not self._stop.is_set():
            try:
                self._list()
                backoff = BACKOFF_S[0]
                while not self._stop.is_set():
                    self._watch()
                    gone = 0
            except _Gone:
                _log.info("endpointslice watch expired; listing again", namespace=self.namespace, service=self.service)
                gone += 1
                if gone > 1:
                    self._stop.wait(min(BACKOFF_S[0] * 2 ** (gone - 2), BACKOFF_S[1]))
            except Exception as exc:  # noqa: BLE001 - whatever it is, retry; the last slices stay in use
                if self._stop.is_set():
                    return
                self._failed(exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])

    def _list(self) -> None:
        response = self._api.list_namespaced_endpoint_slice(
            self.namespace,
            label_selector=f"{SERVICE_LABEL}={self.service}",
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
        )
        # With _preload_content=False the client returns the raw urllib3 response, not the
        # V1EndpointSliceList its annotations promise.
        data = json.loads(response.data)  # type: ignore[attr-defined]
        slices = {item["metadata"]["name"]: item for item in data.get("items") or []}
        with self._lock:
            changed = slices != self._slices
            self._slices = slices
            self.resource_version = data["metadata"].get("resourceVersion")
        if self.error is not None or not self.synced.is_set():
            _log.info("endpointslices listed", namespace=self.namespace, service=self.service, slices=len(slices))
        self.error = None
        self.synced.set()
        if changed:
            self._on_change()

    def _watch(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        self._response = self._api.list_namespaced_endpoint_slice(
            self.namespace,
            label_selector=f"{SERVICE_LABEL}={self.service}",
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=WATCH_S,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
        )
        try:
            if self._stop.is_set():
                return  # stop() ran before the response existed, so it could not interrupt it
            for line in iter_resp_lines(self._response):
                if self._stop.is_set():
                    return
                if line.strip():
                    self._event(json.loads(line))
        finally:
            self._response.release_conn()
            self._response = None

    def _event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        name = (obj.get("metadata") or {}).get("name")
        with self._lock:
            if version:
                self.resource_version = version
            if kind == "BOOKMARK" or not name:
                return
            if kind == "DELETED":
                changed = self._slices.pop(name, None) is not None
            elif kind in ("ADDED", "MODIFIED"):
                changed = self._slices.get(name) != obj
                self._slices[name] = obj
            else:
                return
        if changed:
            self._on_change()

    def _failed(self, exc: Exception) -> None:
        message = _describe(exc, self.namespace)
        if message != self.error:
            _log.warning(
                "endpointslice watch failed; retrying, the endpoints last seen stay in use",
                namespace=self.namespace,
                service=self.service,
                error=message,
            )
        self.error = message


def _interrupt(response: Any) -> None:
    """End a read blocked on a watch stream, from another thread: shutting the socket down wakes
    the reader at once (closing the response would wait for the reader's lock)."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed


def _describe(exc: Exception, namespace: str) -> str:
    status = getattr(exc, "status", None)
    if status == 403:
        return (
            f"forbidden (403): this control plane may not list and watch endpointslices in namespace {namespace!r}; "
            "grant its ServiceAccount list and watch on discovery.k8s.io endpointslices there (the chart's "
            "discovery.namespaces)"
        )
    if status is not None:
        return f"HTTP {status} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {exc}"


def api_client(kubeconfig: Path | None) -> tuple[Any, str]:
    """A ``kubernetes`` ApiClient and the namespace it defaults to: from ``kubeconfig``, else
    from the pod's service account (in a cluster). Raises ValueError naming what is missing."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        if kubeconfig is not None:
            config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
            _, active = config.list_kube_config_contexts(config_file=str(kubeconfig))
            namespace = (active or {}).get("context", {}).get("namespace") or "default"
        else:
            config.load_incluster_config(client_configuration=configuration)
            namespace = IN_CLUSTER_NAMESPACE.read_text().strip() if IN_CLUSTER_NAMESPACE.exists() else "default"
    except Exception as exc:  # noqa: BLE001 - a kubeconfig fails in many ways (YAML, missing keys, files); each is one line
        where = (
            f"kubeconfig {kubeconfig}" if kubeconfig is not None else "the pod's service account (in-cluster config)"
        )
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"cannot use {where}: {reason}") from None
    return client.ApiClient(configuration), namespace


__all__ = ["SERVICE_LABEL", "SliceWatch", "api_client"]
