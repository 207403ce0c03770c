"""``vllm-sr extproc serve``: the ext_proc gRPC server, its subscription, and its status port.

    Worker        one process: a grpc.aio ExternalProcessor server, the delta ADS subscription
                  to sidecar data, the members' cards; all on one event loop
    serve()       one worker in this process, or N worker processes sharing the gRPC port
                  (SO_REUSEPORT: the kernel spreads Envoy's connections over them) under this
                  process (sr_base/workers.py, the runtime's supervisor too), which serves
                  /status, /metrics and /healthz for all of them from the workers' reports

SIGTERM drains: the gRPC server stops taking streams, those open finish within ``drain_s``,
then the worker exits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any

import grpc
import uvloop
from envoy.config.core.v3 import base_pb2
from envoy.service.accesslog.v3 import als_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from sr_base import log, tracing
from sr_base.workers import Report, Workers
from sr_control.extproc.auth import KeyRing
from sr_control.extproc.cards import CardBook
from sr_control.extproc.decide import CardChecks
from sr_control.extproc.incoming import Sidecar
from sr_control.extproc.metrics import Metrics
from sr_control.extproc.outcomes import Outcomes
from sr_control.extproc.pool import Pool
from sr_control.extproc.processor import Processor
from sr_control.extproc.settings import SidecarSettings
from sr_control.extproc.subscription import Subscription
from sr_control.extproc.upstream import Http
from sr_control.extproc.versions import VersionStore
from sr_control.xds.http import StatusServer

# Bodies of up to 32 MiB come whole in one message (grpcio's default limit is 4 MiB).
MAX_MESSAGE = 64 * 1024 * 1024
_STATUS_EVERY_S = 0.5
NOT_READY = "no data yet for the listeners served"
NOT_ALIVE = "a worker stopped following the control plane"
_log = log.get_logger("vllm_sr.extproc")


class Worker:
    def __init__(self, settings: SidecarSettings, *, reuse_port: bool = False, status_at: str = "") -> None:
        self.settings = settings
        self.reuse_port = reuse_port
        self.node = base_pb2.Node(
            id=settings.node_id or f"vllm-sr-sidecar/{socket.gethostname()}/{os.getpid()}", cluster="vllm-sr-sidecar"
        )
        # Where this sidecar's status port answers, told to the control plane in the node's
        # metadata: `vllm-sr status` finds every sidecar from the control plane's nodes alone.
        self.status_at = status_at or (
            f"{settings.status_address}:{settings.status_port}" if settings.status_port else ""
        )
        self.node.metadata.update({"vllm_sr": {"status": self.status_at, "listen": settings.listen}})
        self.port = 0
        self.stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._subscribing: asyncio.Future[None] | None = None
        self.started = threading.Event()

    async def run(self, on_status: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Serve until ``stop()``; raises OSError when the port cannot be bound."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        s = self.settings
        http = Http()
        cards = CardBook(http, refresh_s=s.card_refresh_s, timeout_s=s.card_timeout_s)
        store = VersionStore()
        self.sidecar = sidecar = Sidecar(s, store, cards, Pool(cards), http, KeyRing(), Metrics())
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.max_send_message_length", MAX_MESSAGE),
                # One port shared by N workers, or refused when taken (a second sidecar on the
                # port would silently take half of Envoy's streams).
                ("grpc.so_reuseport", 1 if self.reuse_port else 0),
            ]
        )
        pb_grpc.add_ExternalProcessorServicer_to_server(Processor(sidecar), server)
        # Envoy's access log of each listener, to count every response it sent (outcomes.py).
        als_pb2_grpc.add_AccessLogServiceServicer_to_server(Outcomes(sidecar.metrics), server)
        if s.socket:
            self.port = _bind_socket(server, s.socket)
        else:
            try:
                self.port = server.add_insecure_port(f"{s.host}:{s.port}")
            except RuntimeError:
                self.port = 0
            if self.port == 0:
                raise OSError(f"cannot listen on {s.host}:{s.port} (in use, or not an address of this host)")
        await server.start()

        checks = CardChecks(store, cards)
        cards.on_change = checks.card_changed

        def changed(data: Any) -> None:
            asyncio.ensure_future(checks.arrived(data))  # its members' cards read, its signals checked
            sidecar.metrics.versions.labels(data.listener).set(
                sum(1 for v in store.versions() if v.listener == data.listener)
            )

        self.subscription = Subscription(s.xds, store, self.node, s.listeners, on_change=changed, tls=s.xds_tls)
        self._subscribing = asyncio.ensure_future(self.subscription.run())
        tasks: list[asyncio.Future[None]] = [self._subscribing]
        if on_status is not None:
            tasks.append(asyncio.ensure_future(self._report(on_status)))
        _log.info("extproc serving", at=s.listen, xds=s.xds, node=self.node.id, listeners=list(s.listeners) or "all")
        self.started.set()
        try:
            await self._stop.wait()
        finally:
            self.stopping = True
            # Drain: no new streams; those open finish (within drain_s), then everything stops.
            await server.stop(grace=s.drain_s)
            self.subscription.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await http.close()
            _log.info("extproc stopped", node=self.node.id)

    def stop(self) -> None:
        """From any thread or a signal handler."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)

    def alive(self) -> bool:
        """The worker's loop runs and its subscription still follows the control plane."""
        task = self._subscribing
        return self._loop is not None and self._loop.is_running() and (task is None or not task.done())

    def ready(self) -> bool:
        """Holding data for every listener served (for all listeners: for at least one)."""
        if not self.started.is_set() or self.stopping:
            return False
        held = self.sidecar.store.current()
        wanted = self.settings.listeners
        return all(listener in held for listener in wanted) if wanted else bool(held)

    def status(self) -> dict[str, Any]:
        """Called on the worker's own loop (see status_from_thread)."""
        sub = self.subscription.status
        store = self.sidecar.store
        cards = self.sidecar.cards
        pool = self.sidecar.pool
        listeners: dict[str, Any] = {}
        for data in store.versions():
            entry = listeners.setdefault(data.listener, {"current": None, "versions": []})
            entry["versions"].append(data.version)
        for name, data in store.current().items():
            listeners.setdefault(name, {"current": None, "versions": []})["current"] = data.version
        members = {}
        for name, state in cards.states().items():
            card = state.card
            members[name] = {
                "down": state.error if (card is None or not state.healthy) else None,
                "question_types": sorted(card.question_types) if card else [],
                "modalities": sorted(card.modalities) if card else [],
                "contract": card.contract if card else None,
                # As the card lists them (media limits too), else the declared ones routing reads.
                "limits": (dict(card.listed_limits) or {k: v for k, v in asdict(card.limits).items() if v is not None})
                if card
                else {},
            }
        return {
            "pid": os.getpid(),
            "node": self.node.id,
            "ready": self.ready(),
            "alive": self.alive(),
            "port": self.port,
            "socket": self.settings.socket or None,
            "listen": self.settings.listen,
            "status": self.status_at or None,
            "xds": {
                "target": self.subscription.target,  # the control plane in use, of those given
                "connected": sub.connected,
                "last_error": sub.last_error,
                "received": sub.received,
                "refused": sub.refused,
            },
            "listeners": listeners,
            "members": members,
            "open_calls": pool.open_calls(),
            "forwarding": self.settings.forwarding,
        }

    def status_from_thread(self, timeout: float = 2.0) -> dict[str, Any]:
        loop = self._loop
        if loop is None or not self.started.is_set():
            return {"pid": os.getpid(), "ready": False, "starting": True}
        future: Future[dict[str, Any]] = Future()
        loop.call_soon_threadsafe(lambda: future.set_result(self.status()))
        return future.result(timeout)

    async def _report(self, on_status: Callable[[dict[str, Any]], None]) -> None:
        while True:
            on_status(self.status())
            await asyncio.sleep(_STATUS_EVERY_S)


def _bind_socket(server: grpc.aio.Server, path: str) -> int:
    """Listen on the Unix socket ``path``, mode 0600: only processes of this user (Envoy, beside
    it) can connect; anyone else's connect() fails with EACCES before a byte is read.

    The umask is narrowed while gRPC creates the file, so it is never open to others, not even
    for a moment. gRPC would silently take over the path of a live socket (unlinking it), so a
    path another sidecar still answers on is refused first."""
    _check_socket_free(path)
    folder = os.path.dirname(path)
    if folder and not os.path.isdir(folder):
        os.makedirs(folder, mode=0o700, exist_ok=True)
    old = os.umask(0o177)
    try:
        bound = server.add_insecure_port(f"unix:{path}")
    except RuntimeError:
        bound = 0
    finally:
        os.umask(old)
    if bound == 0:
        raise OSError(
            f"cannot listen on the Unix socket {path} (its folder is missing or not writable, or a file is in the way)"
        )
    os.chmod(path, 0o600)  # whatever the file system did with the umask
    return 0


def _check_socket_free(path: str) -> None:
    if not os.path.exists(path):
        return
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except OSError:
            return  # a stale socket of a sidecar that is gone: gRPC replaces it
    raise OSError(f"cannot listen on the Unix socket {path}: another process answers on it (another sidecar?)")


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """A worker's event loop is uvloop's: with the same gRPC work, about 0.25 ms less CPU per
    request than asyncio's own loop (docs/extproc/flow.md, "What it costs")."""
    uvloop.run(main)


# ---------------------------------------------------------------------------- one process


def serve(
    settings: SidecarSettings,
    *,
    stop: threading.Event | None = None,
    on_ready: Callable[[int, int], None] | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT (or ``stop``); one worker here, or ``settings.workers`` processes.
    Returns the exit code: 0 after a stop, 1 when a worker died."""
    if settings.workers > 1:
        return _supervise(settings, stop, on_ready)
    # The status port first: the worker tells the control plane where it answers (port 0 included).
    http = StatusServer(
        settings.status_address,
        settings.status_port,
        status=lambda: {"workers": [worker.status_from_thread()]},
        metrics=lambda: worker.sidecar.metrics.text() if worker.started.is_set() else b"",
        serving=lambda: worker.ready(),
        alive=lambda: worker.alive(),
        not_ready=NOT_READY,
        not_alive=NOT_ALIVE,
    )
    worker = Worker(settings, status_at=f"{settings.status_address}:{http.port}")
    http.start()

    def on_signal(*_: object) -> None:
        worker.stop()

    _signals(on_signal)
    if stop is not None:

        def stop_when_asked() -> None:
            stop.wait()
            worker.stop()

        threading.Thread(target=stop_when_asked, daemon=True).start()
    if on_ready is not None:
        threading.Thread(target=lambda: (worker.started.wait(), on_ready(worker.port, http.port)), daemon=True).start()
    try:
        run_loop(worker.run())
    finally:
        http.stop()
        tracing.shutdown()  # the spans still buffered go out before the process ends
    return 0


def _signals(handler: Callable[..., None]) -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


# ---------------------------------------------------------------------------- N processes


def _check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        # As gRPC binds: a port held only by connections in TIME-WAIT (a sidecar stopped a
        # moment ago, Envoy's connections closed) is free; one something listens on is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            raise OSError(f"cannot listen on {host}:{port} (in use, or not an address of this host)") from None


def _worker_main(index: int, report: Report, settings: SidecarSettings) -> None:
    """A worker process: PROMETHEUS_MULTIPROC_DIR is set, so its metrics land in shared files."""
    worker = Worker(settings, reuse_port=True)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    try:
        run_loop(worker.run(on_status=report))
    finally:
        # A spawned process ends without running atexit: the buffered spans go out here.
        tracing.shutdown()


def _supervise(
    settings: SidecarSettings, stop: threading.Event | None, on_ready: Callable[[int, int], None] | None
) -> int:
    _check_port_free(settings.host, settings.port)
    logging = (os.environ.get("VSR_LOG_LEVEL", "info"), os.environ.get("VSR_LOG_FORMAT", "console"))
    workers = Workers(
        settings.workers, _worker_main, settings, name="extproc", stop_s=settings.drain_s + 5, logging=logging
    )
    with workers:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=workers.metrics_dir)

        def statuses() -> list[dict[str, Any]]:
            return [s or {"ready": False, "starting": True} for s in workers.reports()]

        def ready() -> bool:
            now = time.time()
            return all(s.get("ready") and now - s.get("at", 0) < 5 for s in statuses()) and workers.all_alive()

        def alive() -> bool:
            now = time.time()
            return workers.all_alive() and all(now - s.get("at", now) < 10 and s.get("alive", True) for s in statuses())

        http = StatusServer(
            settings.status_address,
            settings.status_port,
            status=lambda: {"workers": statuses()},
            metrics=lambda: generate_latest(registry),
            serving=ready,
            alive=alive,
            not_ready=NOT_READY,
            not_alive=NOT_ALIVE,
        )
        http.start()
        try:
            if stop is not None:

                def stop_when_asked() -> None:
                    stop.wait()
                    workers.stopping.set()

                threading.Thread(target=stop_when_asked, daemon=True).start()
            if on_ready is not None:

                def announce() -> None:
                    while not workers.stopping.is_set() and not ready():
                        time.sleep(0.05)
                    if not workers.stopping.is_set():
                        on_ready(settings.port, http.port)

                threading.Thread(target=announce, daemon=True).start()
            codes = workers.watch()
            if codes is not None:
                _log.error("extproc worker died", codes=codes)
                return 1
            return 0
        finally:
            http.stop()


__all__ = ["Worker", "serve"]
