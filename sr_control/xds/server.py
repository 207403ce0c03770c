"""The gRPC ADS service: state of the world and delta on one port.

Each stream runs one loop over one queue. A reader thread puts the node's requests on it, and
the cache puts "the snapshot changed" on it, so a stream's state is only ever touched by its
own loop.

Every open stream holds two threads (its loop and its reader) for as long as the node is
connected, Envoys and sidecars alike, so the number of streams is capped (``max_streams``). A
stream over the cap is refused with RESOURCE_EXHAUSTED and a log line saying so; the node keeps
its last config and retries with backoff.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc

from sr_base import log
from sr_control.xds.cache import SnapshotCache
from sr_control.xds.delta import DeltaStream
from sr_control.xds.hooks import Hooks, Protocol, StreamInfo
from sr_control.xds.sotw import SotwStream
from sr_control.xds.stream import REMOVAL_GRACE

Stream = SotwStream | DeltaStream
# A whole config for 1,000 listeners is a few MiB; grpcio refuses messages over 4 MiB by default.
MAX_MESSAGE = 64 * 1024 * 1024
# Envoys and sidecars connected at once; see docs/xds/serve.md for sizing.
MAX_STREAMS = 256
# Threads beyond the cap, so that a stream over it reaches our code and is refused with a log
# line instead of by grpcio, which refuses silently.
_SPARE = 4
_CLOSED = object()
_log = log.get_logger("vllm_sr.xds")


class AdsService(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    def __init__(
        self,
        cache: SnapshotCache,
        hooks: Hooks = Hooks(),
        *,
        max_streams: int = MAX_STREAMS,
        removal_grace: float = REMOVAL_GRACE,
    ) -> None:
        self.removal_grace = removal_grace
        self.cache = cache
        self.hooks = hooks
        self.max_streams = max_streams
        self.refused = 0  # streams refused because max_streams were open
        self._ids = itertools.count(1)
        self._open = 0
        self._lock = threading.Lock()

    def StreamAggregatedResources(
        self, request_iterator: Iterator[Any], context: grpc.ServicerContext
    ) -> Iterator[Any]:
        return self._serve("sotw", SotwStream, request_iterator, context)

    def DeltaAggregatedResources(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        return self._serve("delta", DeltaStream, request_iterator, context)

    def _serve(
        self,
        protocol: Protocol,
        make: Callable[..., Stream],
        requests: Iterator[Any],
        context: grpc.ServicerContext,
    ) -> Iterator[Any]:
        with self._lock:
            full = self._open >= self.max_streams
            if full:
                self.refused += 1
            else:
                self._open += 1
        if full:
            _log.error(
                "ads stream refused: too many open streams",
                peer=context.peer(),
                protocol=protocol,
                max_streams=self.max_streams,
                hint="raise --max-streams; the node keeps its last config and retries",
            )
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"vllm-sr: {self.max_streams} ADS streams are open (--max-streams)"
            )
        try:
            yield from self._loop(protocol, make, requests, context)
        finally:
            with self._lock:
                self._open -= 1

    def _loop(
        self, protocol: Protocol, make: Callable[..., Stream], requests: Iterator[Any], context: grpc.ServicerContext
    ) -> Iterator[Any]:
        events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        info = StreamInfo(next(self._ids), protocol, context.peer())
        stream = make(
            info, self.cache, self.hooks, lambda: events.put(("push", None)), removal_grace=self.removal_grace
        )

        def read() -> None:
            try:
                for request in requests:
                    events.put(("request", request))
            except grpc.RpcError:
                pass  # the node went away; the loop ends on _CLOSED either way
            finally:
                events.put(_CLOSED)

        threading.Thread(target=read, name=f"ads-{info.id}-reader", daemon=True).start()
        context.add_callback(lambda: events.put(_CLOSED))
        try:
            while True:
                event = events.get()
                if event is _CLOSED:
                    return
                kind, item = event
                yield from (stream.on_request(item) if kind == "request" else stream.on_push())
        finally:
            stream.close()


def make_server(service: AdsService, address: str) -> tuple[grpc.Server, int]:
    """A gRPC server for ``service`` bound to ``address`` ("host:port"), not yet started; returns (server, port)."""
    threads = service.max_streams + _SPARE
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ads"),
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
        maximum_concurrent_rpcs=threads,
    )
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(service, server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {address} (in use, or not an address of this host)")
    return server, port
