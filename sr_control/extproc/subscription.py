"""The sidecar's side of ADS: a delta subscription to ``sidecar/<listener>`` resources.

Each resource version arrives once, is read into ``ListenerData`` and stored by version
(versions.py); the sidecar ACKs it, or NACKs it with the reason when it cannot read it, so the
control plane's ``/status`` shows the refusal beside Envoy's. A broken stream is reopened with
backoff, announcing what the sidecar already holds (``initial_resource_versions``) so an
unchanged config is not sent again. The subscription is to the listeners the sidecar serves,
or to every listener (``*``).

Several control planes (replicas on one config, serving the same versions) are tried in turn:
a stream that breaks or cannot open moves to the next one, after the back-off Envoy's
bootstrap sets too (``XDS_BACKOFF``: jittered, capped at 0.5 s), so losing one control plane
moves the sidecar to another within about half a second. With ``tls`` the sidecar presents its
certificate and checks the control plane's; the files are read again at each connection, so
a renewed certificate is used from the next one on.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import json_format
from google.rpc import status_pb2
from xds.type.v3 import typed_struct_pb2

from sr_base.log import get_logger
from sr_control.compiler import names
from sr_control.compiler.protos import SIDECAR, SIDECAR_PAYLOAD
from sr_control.compiler.settings import XDS_BACKOFF, XdsTls
from sr_control.extproc.data import DataError, ListenerData
from sr_control.extproc.versions import VersionStore
from sr_control.xds.tls import channel_credentials

_log = get_logger("vllm_sr.extproc.xds")
MAX_MESSAGE = 64 * 1024 * 1024
# Each stream opens a new channel, and a new channel must try to connect at once. grpcio would
# otherwise share one subchannel per target across channels, with its own reconnect back-off
# (1 s, growing by 1.6x to 2 min) carried over from the failures while the control plane was
# down: measured, the sidecar came back 1.2-2.5 s after a restarted control plane served.
RECONNECT_OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", int(XDS_BACKOFF[0] * 1000)),
    ("grpc.min_reconnect_backoff_ms", int(XDS_BACKOFF[0] * 1000)),
    ("grpc.max_reconnect_backoff_ms", int(XDS_BACKOFF[1] * 1000)),
]


def backoff(attempt: int, schedule: tuple[float, float] = XDS_BACKOFF) -> float:
    """The wait before reopening a stream after ``attempt`` failures in a row: a random wait
    below base * 2**attempt, capped, drawn as Envoy draws its own (full jitter)."""
    base, cap = schedule
    return random.uniform(0, min(base * 2 ** min(attempt, 30), cap))


@dataclass
class SubscriptionStatus:
    connected: bool = False
    since: float | None = None  # when the state last changed (monotonic)
    last_error: str | None = None
    received: int = 0  # resource versions taken
    refused: list[str] = field(default_factory=list)  # the last few NACK messages


class Subscription:
    def __init__(
        self,
        targets: str | Sequence[str],
        store: VersionStore,
        node: base_pb2.Node,
        listeners: tuple[str, ...] = (),
        on_change: Callable[[ListenerData], None] | None = None,
        tls: XdsTls | None = None,
    ) -> None:
        # "a:1,b:2" or a list: the control planes, tried in this order.
        self.targets = tuple(t.strip() for t in targets.split(",")) if isinstance(targets, str) else tuple(targets)
        if not self.targets or not all(self.targets):
            raise ValueError(f"no control plane address in {targets!r}")
        self.tls = tls
        self._at = 0  # the index of the control plane in use
        self.store = store
        self.node = node
        self.names = [names.sidecar(listener) for listener in listeners] or ["*"]
        self.status = SubscriptionStatus()
        self._on_change = on_change or (lambda data: None)
        self._stopped = asyncio.Event()
        self._held: dict[str, str] = {}  # resource name -> version held
        self.first = asyncio.Event()  # set once the first response was taken
        self._up = False  # whether the stream in hand has taken a response

    @property
    def target(self) -> str:
        """The control plane in use (or tried next)."""
        return self.targets[self._at]

    async def run(self) -> None:
        """Subscribe until stopped, reopening the stream whenever it breaks."""
        failures = 0  # in a row, since a stream last took a response
        while not self._stopped.is_set():
            self._up = False
            try:
                async with self._channel() as channel:
                    await self._stream(ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel))
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as exc:
                self._down(f"{exc.code().name}: {exc.details()}")
            except Exception as exc:  # noqa: BLE001 - a subscription that dies would freeze the data
                _log.exception("subscription error", xds=self.target)
                self._down(f"{type(exc).__name__}: {exc}")
            if self._stopped.is_set():
                break
            failures = 0 if self._up else failures + 1
            # The next control plane: this one failed, another replica may be serving.
            self._at = (self._at + 1) % len(self.targets)
            await self._sleep(backoff(failures))

    def _channel(self) -> grpc.aio.Channel:
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.keepalive_time_ms", 30_000),
            *RECONNECT_OPTIONS,
        ]
        if self.tls is None:
            return grpc.aio.insecure_channel(self.target, options=options)
        return grpc.aio.secure_channel(self.target, channel_credentials(self.tls), options=options)

    def stop(self) -> None:
        self._stopped.set()

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopped.wait(), seconds)
        except TimeoutError:
            pass

    def _down(self, why: str) -> None:
        if self.status.connected or self.status.last_error != why:
            _log.warning("xds stream down", xds=self.target, error=why)
        self.status.connected = False
        self.status.since = time.monotonic()
        self.status.last_error = why

    async def _stream(self, stub: Any) -> None:
        outbox: asyncio.Queue[discovery_pb2.DeltaDiscoveryRequest | None] = asyncio.Queue()
        await outbox.put(
            discovery_pb2.DeltaDiscoveryRequest(
                node=self.node,
                type_url=SIDECAR,
                resource_names_subscribe=self.names,
                initial_resource_versions=dict(self._held),
            )
        )

        async def requests() -> AsyncIterator[discovery_pb2.DeltaDiscoveryRequest]:
            while True:
                item = await outbox.get()
                if item is None:
                    return
                yield item

        call = stub.DeltaAggregatedResources(requests())
        stop = asyncio.ensure_future(self._stopped.wait())
        try:
            while True:
                read = asyncio.ensure_future(call.read())
                done, _ = await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
                if stop in done:
                    # gRPC's read, cancelled as its call fails, ends with the call's error
                    # rather than as cancelled; on the way out that is no error, and left
                    # unretrieved asyncio would print its traceback.
                    read.add_done_callback(_quiet)
                    read.cancel()
                    call.cancel()
                    return
                response = read.result()
                if response is grpc.aio.EOF:
                    raise ConnectionError("the control plane closed the stream")
                if not self.status.connected:
                    _log.info("xds stream up", xds=self.target, node=self.node.id)
                self._up = True
                self.status.connected, self.status.since, self.status.last_error = True, time.monotonic(), None
                await outbox.put(self._take(response))
        finally:
            stop.cancel()
            await outbox.put(None)

    def _take(self, response: discovery_pb2.DeltaDiscoveryResponse) -> discovery_pb2.DeltaDiscoveryRequest:
        """Store every resource of ``response``; the ACK (or the NACK naming what failed)."""
        problems: list[str] = []
        now = time.monotonic()
        for resource in response.resources:
            try:
                data = read_resource(resource, now)
            except DataError as exc:
                problems.append(str(exc))
                continue
            self.store.add(data)
            self._held[resource.name] = resource.version
            self.status.received += 1
            self._on_change(data)
        for name in response.removed_resources:
            self._held.pop(name, None)
            self.store.remove(name.removeprefix(names.sidecar("")))
        self.first.set()
        ack = discovery_pb2.DeltaDiscoveryRequest(type_url=response.type_url, response_nonce=response.nonce)
        if problems:
            message = "; ".join(problems)
            _log.error("sidecar data refused", xds=self.target, error=message)
            self.status.refused = (self.status.refused + [message])[-5:]
            ack.error_detail.CopyFrom(status_pb2.Status(code=3, message=message))  # INVALID_ARGUMENT
        return ack


def _quiet(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def read_resource(resource: discovery_pb2.Resource, received_at: float) -> ListenerData:
    struct = typed_struct_pb2.TypedStruct()
    if not resource.resource.Unpack(struct):
        raise DataError(f"{resource.name}: not a TypedStruct ({resource.resource.type_url})")
    if struct.type_url != SIDECAR_PAYLOAD:
        raise DataError(f"{resource.name}: payload {struct.type_url!r}; this sidecar reads {SIDECAR_PAYLOAD}")
    payload = json_format.MessageToDict(struct.value)
    return ListenerData.of(payload, resource.version, received_at)


__all__ = ["RECONNECT_OPTIONS", "Subscription", "SubscriptionStatus", "backoff", "read_resource"]
