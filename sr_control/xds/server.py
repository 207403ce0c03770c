"""The gRPC ADS service: state of the world and delta on one port, every stream on one event loop.

The server is ``grpc.aio`` on an asyncio loop of its own thread. Each stream is a coroutine
that reads its node's requests and "the snapshot changed" wake-ups from one queue, so a
stream's state is only ever touched by its own coroutine (``stream.py`` does the work; it does
no I/O). An open stream costs a coroutine, a reader task and its state, not threads, so one
process serves thousands of nodes (docs/xds/scale.md).

Responses go out as bytes: the body serialized once per content and shared by every node that
needs it (``encoded.py``), with the stream's own nonce appended.

Flow control: a stream writes its responses itself and awaits only its own writes. A node that
stops reading fills its HTTP/2 window and stalls its own stream, never another: the fan-out of
an edit only sets a flag on each stream. Each stream has at most one step in flight (it waits
for the node's ACK), so a stalled node holds at most that response in memory.

The number of streams is capped (``max_streams``). A stream over the cap is refused with
RESOURCE_EXHAUSTED and a log line saying so; the node keeps its last config and retries with
backoff.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from envoy.service.discovery.v3 import discovery_pb2

from sr_base import log
from sr_control.xds.cache import SnapshotCache
from sr_control.xds.delta import DeltaStream
from sr_control.xds.encoded import wire
from sr_control.xds.hooks import Hooks, Protocol, StreamInfo
from sr_control.xds.sotw import SotwStream
from sr_control.xds.stream import REMOVAL_GRACE
from sr_control.xds.tls import ServerTls, bind

Stream = SotwStream | DeltaStream
# A whole config for 1,000 listeners is a few MiB; grpcio refuses messages over 4 MiB by default.
MAX_MESSAGE = 64 * 1024 * 1024
# Envoys and sidecars connected at once; see docs/xds/scale.md for sizing.
MAX_STREAMS = 10_000
# Edits that come within this long after a push go out together when it ends (a burst of saves,
# or pod churn, is one push); an edit after a quiet spell goes out at once.
DEBOUNCE = 0.05
_SERVICE = "envoy.service.discovery.v3.AggregatedDiscoveryService"
_CLOSED = object()
_PUSH = object()
_log = log.get_logger("vllm_sr.xds")


class AdsService:
    def __init__(
        self,
        cache: SnapshotCache,
        hooks: Hooks = Hooks(),
        *,
        max_streams: int = MAX_STREAMS,
        removal_grace: float = REMOVAL_GRACE,
        debounce: float = DEBOUNCE,
    ) -> None:
        self.removal_grace = removal_grace
        self.cache = cache
        cache.debounce = debounce
        self.hooks = hooks
        self.max_streams = max_streams
        self.refused = 0  # streams refused because max_streams were open
        self._ids = itertools.count(1)
        self._open = 0

    def handler(self) -> grpc.GenericRpcHandler:
        """Both ADS methods, answering with bytes (the shared bodies) instead of messages."""

        def method(protocol: Protocol, make: Callable[..., Stream], request: Any) -> grpc.RpcMethodHandler:
            async def serve(_requests: Any, context: grpc.aio.ServicerContext) -> None:
                await self._serve(protocol, make, context)

            return grpc.stream_stream_rpc_method_handler(
                serve, request_deserializer=request.FromString, response_serializer=wire
            )

        return grpc.method_handlers_generic_handler(
            _SERVICE,
            {
                "StreamAggregatedResources": method("sotw", SotwStream, discovery_pb2.DiscoveryRequest),
                "DeltaAggregatedResources": method("delta", DeltaStream, discovery_pb2.DeltaDiscoveryRequest),
            },
        )

    async def _serve(self, protocol: Protocol, make: Callable[..., Stream], context: grpc.aio.ServicerContext) -> None:
        # Only this loop's coroutines count streams, so no lock.
        if self._open >= self.max_streams:
            self.refused += 1
            _log.error(
                "ads stream refused: too many open streams",
                peer=context.peer(),
                protocol=protocol,
                max_streams=self.max_streams,
                hint="raise --max-streams; the node keeps its last config and retries",
            )
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"vllm-sr: {self.max_streams} ADS streams are open (--max-streams)"
            )
        self._open += 1
        try:
            await self._loop(protocol, make, context)
        finally:
            self._open -= 1

    async def _loop(self, protocol: Protocol, make: Callable[..., Stream], context: grpc.aio.ServicerContext) -> None:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Any] = asyncio.Queue()
        due = False  # a wake-up is queued: more of them before it is taken add nothing

        def wake_here() -> None:
            nonlocal due
            if not due:
                due = True
                events.put_nowait(_PUSH)

        def wake() -> None:  # from the cache, a timer, or another stream: any thread
            if threading.get_ident() == loop_thread:
                wake_here()
            else:
                loop.call_soon_threadsafe(wake_here)

        loop_thread = threading.get_ident()
        info = StreamInfo(next(self._ids), protocol, context.peer())
        stream = make(info, self.cache, self.hooks, wake, removal_grace=self.removal_grace, later=loop.call_later)

        async def read() -> None:
            try:
                while True:
                    request = await context.read()
                    if request is grpc.aio.EOF:
                        return
                    events.put_nowait(request)
            except (grpc.RpcError, asyncio.CancelledError):
                pass  # the node went away; the loop ends on _CLOSED either way
            finally:
                events.put_nowait(_CLOSED)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                event = await events.get()
                if event is _CLOSED:
                    return
                if event is _PUSH:
                    due = False
                    responses = stream.on_push()
                else:
                    responses = stream.on_request(event)
                for response in responses:
                    await context.write(response)
        finally:
            reader.cancel()
            stream.close()


class AdsServer:
    """A ``grpc.aio`` server on an event loop of its own thread, driven from synchronous code."""

    def __init__(self, service: AdsService, address: str, tls: ServerTls | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ads", daemon=True)
        self._thread.start()
        self.stopped = threading.Event()
        try:
            self.server, self.port = self._run(self._make(service, address, tls))
        except BaseException:
            self._close_loop()
            raise

    async def _make(self, service: AdsService, address: str, tls: ServerTls | None) -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(
            # For grpcio's own synchronous work; every stream runs on the loop.
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="ads"),
            handlers=[service.handler()],
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE),
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                # grpcio shares ports by default: a second control plane on a taken port would
                # silently split the Envoys between two processes.
                ("grpc.so_reuseport", 0),
                # Envoy pings the idle ADS stream (bootstrap keepalive); grpcio would otherwise
                # count those pings as abuse and close the connection.
                ("grpc.http2.min_recv_ping_interval_without_data_ms", 1_000),
                ("grpc.http2.max_ping_strikes", 0),
            ],
        )
        return server, bind(server, address, tls)  # over mTLS when tls (tls.py)

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def start(self) -> None:
        self._run(self.server.start())

    def stop(self, grace: float | None = None) -> threading.Event:
        """Close every stream (after ``grace`` seconds) and the loop; the Event is set once done."""
        if not self.stopped.is_set():
            try:
                self._run(self.server.stop(grace))
            finally:
                self._close_loop()
                self.stopped.set()
        return self.stopped

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()


def make_server(service: AdsService, address: str, tls: ServerTls | None = None) -> tuple[AdsServer, int]:
    """A gRPC server for ``service`` bound to ``address`` ("host:port"), not yet started; returns (server, port)."""
    server = AdsServer(service, address, tls)
    return server, server.port
