"""Simulated ADS nodes over real gRPC, for tests and benches: a fleet of Envoys and sidecars.

    async with Fleet("127.0.0.1:18000", envoys=100, sidecars=10, listeners=["public"]) as fleet:
        await fleet.in_step(versions, timeout=5)   # every node holds these versions
        at = fleet.in_step_at(versions)           # node name -> when it got there (monotonic)

``versions`` says what each type must be at: a Snapshot, or a mapping from type (URL, or its
name as ``/status`` spells it: "clusters", "listeners", "routes", "sidecar", "endpoints") to
version, such as ``/status``'s ``type_versions``. A node is in step when every type it
subscribes to that ``versions`` names is at that version; ``in_step`` raises TimeoutError
naming the nodes that were not. Sidecars that subscribe to some listeners only (``listeners``)
are told nothing of an edit to the others, so their type version can stay behind: for them pass
a Snapshot, whose per-listener versions are compared instead.

An **Envoy-like** node (``EnvoyNode``) speaks state-of-the-world ADS as Envoy 1.x does with
``set_node_on_first_message_only``: it asks for clusters (wildcard), then endpoints for the
EDS clusters among them, then, once its clusters are in, listeners (wildcard), then the route
tables its listeners name. It ACKs a response with its ``version_info`` and ``nonce`` and the
names it subscribes to; it NACKs one (``refuse``) with ``error_detail``, the version it held
before and the same nonce, and keeps what it held. A **sidecar-like** node (``SidecarNode``)
subscribes to ``sidecar/<listener>`` over delta ADS and ACKs with the nonce alone, as
``sr_control/extproc/subscription.py`` does. ``tests/fleet/test_nodes_envoy.py`` holds the
Envoy-like node to a real Envoy, and the sidecar-like one to that subscription: same requests,
same ACKs.

Every node records what it holds per type and when it took it (``time.monotonic()``, which is
one clock for every process on the host, so a bench can compare times across processes). A
broken stream is reopened with backoff (``backoff``), announcing what the node holds, as
Envoy and the sidecar do. ``Fleet(stalled=N, stalled_sidecars=M)`` then ``fleet.stall()``
makes the first N Envoys and M sidecars nodes that never read again (slow nodes: their receive
window is small, so the control plane's sends to them stall at once); ``node.holds(versions)``
asks one node.

Identical responses are decoded once per process (nodes in step get the same bytes, nonce
included): real Envoys decode on CPUs of their own, simulated ones share the host's.

One process carries a few hundred nodes; a bench runs several processes for thousands.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2
from google.rpc import status_pb2

from sr_control.compiler.protos import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    SIDECAR,
    TYPE_NAMES,
    Cluster,
    ClusterLoadAssignment,
    Listener,
    RouteConfiguration,
)
from sr_control.extproc.subscription import MAX_MESSAGE, RECONNECT_OPTIONS
from sr_control.xds.snapshot import Snapshot

# Envoy's names for what it asks of the control plane, in the order it asks.
ENVOY_TYPES = (CLUSTER, ENDPOINT, LISTENER, ROUTE)
_BY_NAME = {name: t for t, name in TYPE_NAMES.items()}
_MESSAGES = {CLUSTER: Cluster, LISTENER: Listener, ROUTE: RouteConfiguration, ENDPOINT: ClusterLoadAssignment}
_SERVICE = "envoy.service.discovery.v3.AggregatedDiscoveryService"
_EDS = 3  # Cluster.DiscoveryType.EDS
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
# Envoy's status code on a NACK (it reports every rejection as INTERNAL).
_NACK_CODE = 13
# A slow node's receive window: so small that one response fills it and the sender stalls.
_STALL_OPTIONS = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]

Versions = Snapshot | Mapping[str, str]
# refuse(node, type URL, response) -> the error message of a NACK, or None to accept.
Refuse = Callable[["Node", str, Any], str | None]


@dataclass
class Held:
    """One type on one node: what it subscribes to and the version it accepted, since when."""

    names: tuple[str, ...] = ()  # empty: wildcard
    version: str = ""
    nonce: str = ""  # of the last response of this type
    since: float = 0.0  # when ``version`` was accepted
    resources: dict[str, bytes] = field(default_factory=dict)  # name -> the resource as sent
    resource_versions: dict[str, str] = field(default_factory=dict)  # delta: name -> its version


@dataclass(frozen=True, slots=True)
class Ack:
    type_url: str
    version: str
    at: float  # time.monotonic()
    error: str | None = None  # a NACK's message


class Node:
    """One ADS client on a channel of its own, reconnecting until closed."""

    delta = False
    required: frozenset[str] = frozenset()  # types a node must hold before it can be in step

    def __init__(
        self,
        fleet: Fleet,
        name: str,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        backoff: tuple[float, float] = (0.05, 1.0),
        refuse: Refuse | None = None,
    ) -> None:
        self.fleet = fleet
        self.name = name
        self.node = base_pb2.Node(id=name, cluster=fleet.cluster)
        self.types: dict[str, Held] = {}
        self.acks: list[Ack] = []  # every answer sent, in order
        self.requests: list[Any] = []  # every request sent, in order
        self.connected = asyncio.Event()
        self.streams = 0  # streams opened (1 + reconnects)
        self._credentials = credentials
        self._backoff = backoff
        self._refuse = refuse
        self._reading = asyncio.Event()
        self._reading.set()
        self._call: Any = None
        self._task: asyncio.Task[None] | None = None

    # -- what tests call

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def stop_reading(self) -> None:
        """Never read a response again (a stuck node); the stream stays open."""
        self._reading.clear()

    def subscribes(self) -> set[str]:
        return set(self.types)

    def holds(self, versions: Versions | Target) -> bool:
        """Whether the node holds ``versions`` (see the module docstring)."""
        target = versions if isinstance(versions, Target) else Target.of(versions)
        if not self.required <= self.types.keys():
            return False
        return all(target.types.get(t, held.version) == held.version for t, held in self.types.items())

    def since(self, target: Target) -> float:
        """When the node last took one of ``target``'s versions (it holds them all)."""
        return max((h.since for t, h in self.types.items() if t in target.types), default=0.0)

    # -- the stream

    async def _run(self) -> None:
        wait = self._backoff[0]
        stalled = self.name in self.fleet.stalled_names
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            *RECONNECT_OPTIONS,  # as the sidecar: a new channel connects at once, not after grpcio's back-off
            *(_STALL_OPTIONS if stalled else []),
        ]
        while True:
            if self._credentials is not None:
                channel = grpc.aio.secure_channel(self.fleet.address, self._credentials, options=options)
            else:
                channel = grpc.aio.insecure_channel(self.fleet.address, options=options)
            try:
                self._call = self.fleet.open_stream(channel, self.delta)
                self.streams += 1
                self._first = True
                await self._session()
                wait = self._backoff[0]
            except grpc.aio.AioRpcError:
                pass
            finally:
                self.connected.clear()
                await channel.close()
            await asyncio.sleep(wait * (0.5 + random.random()))
            wait = min(wait * 2, self._backoff[1])

    async def _send(self, request: Any) -> None:
        if self._first:
            request.node.CopyFrom(self.node)  # set_node_on_first_message_only
            self._first = False
        self.requests.append(request)
        await self._call.write(request)

    async def _session(self) -> None:
        await self._open()
        while True:
            await self._reading.wait()
            response = await self._call.read()
            if response is grpc.aio.EOF:
                return
            await self._reading.wait()  # a read already waiting when the node stalled: not taken
            self.connected.set()
            await self._take(response)

    async def _open(self) -> None:
        raise NotImplementedError

    async def _take(self, response: Any) -> None:
        raise NotImplementedError

    def _answered(self, t: str, version: str, error: str | None) -> None:
        """Record an answer once it is written: a node is in step only when the control plane can know."""
        now = time.monotonic()
        self.acks.append(Ack(t, version, now, error))
        if error is None:
            held = self.types[t]
            held.version, held.since = version, now
            self.fleet._moved(self)

    def _refused(self, t: str, response: Any) -> str | None:
        return self._refuse(self, t, response) if self._refuse is not None else None


class EnvoyNode(Node):
    """State-of-the-world ADS, Envoy's order: clusters, endpoints, listeners, routes."""

    required = frozenset({CLUSTER, LISTENER})

    async def _open(self) -> None:
        if not self.types:
            self.types[CLUSTER] = Held()
            await self._request(CLUSTER)
            return
        # Reconnecting: every type again at once, each with the version held (Envoy's resume).
        for t in ENVOY_TYPES:
            if t in self.types:
                self.types[t].nonce = ""
                await self._request(t)

    async def _request(self, t: str, *, version: str | None = None, nonce: str = "", error: str = "") -> None:
        held = self.types[t]
        req = discovery_pb2.DiscoveryRequest(
            type_url=t,
            version_info=held.version if version is None else version,
            response_nonce=nonce,
            resource_names=list(held.names),
        )
        if error:
            req.error_detail.CopyFrom(status_pb2.Status(code=_NACK_CODE, message=error))
        await self._send(req)

    async def _take(self, response: discovery_pb2.DiscoveryResponse) -> None:
        t = response.type_url
        held = self.types.get(t)
        if held is None:
            return
        held.nonce = response.nonce
        error = self._refused(t, response)
        if error is not None:
            await self._request(t, nonce=response.nonce, error=error)
            self._answered(t, response.version_info, error)
            return
        sent = self.fleet.named(response)
        # Wildcard types are sent whole; a type asked for by name may leave out what is unchanged.
        held.resources = sent if t in (CLUSTER, LISTENER) else {**held.resources, **sent}
        if t == CLUSTER:
            await self._follow(ENDPOINT, self.fleet.eds_clusters(held.resources.values()))
        elif t == LISTENER:
            await self._follow(ROUTE, self.fleet.route_names(held.resources.values()))
        await self._request(t, version=response.version_info, nonce=response.nonce)
        self._answered(t, response.version_info, None)
        endpoints = self.types.get(ENDPOINT)
        if LISTENER not in self.types and (endpoints is None or endpoints.version):
            # Listeners once the clusters are in, with their endpoints (Envoy's cluster manager
            # initialised).
            self.types[LISTENER] = Held()
            await self._request(LISTENER)

    async def _follow(self, t: str, names: tuple[str, ...]) -> None:
        """Subscribe ``t`` to ``names`` when they changed (before the ACK that named them, as Envoy does)."""
        held = self.types.get(t)
        if held is None:
            if not names:
                return
            held = self.types[t] = Held()
        if names == held.names:
            return
        held.names = names
        held.resources = {n: r for n, r in held.resources.items() if n in names}
        await self._request(t, nonce=held.nonce)


class SidecarNode(Node):
    """Delta ADS for ``sidecar/<listener>`` (or every listener), as the ext_proc sidecar subscribes."""

    delta = True
    required = frozenset({SIDECAR})

    async def _open(self) -> None:
        held = self.types.setdefault(SIDECAR, Held(names=self.fleet.sidecar_names))
        await self._send(
            discovery_pb2.DeltaDiscoveryRequest(
                type_url=SIDECAR,
                resource_names_subscribe=list(held.names),
                initial_resource_versions=held.resource_versions,
            )
        )

    async def _take(self, response: discovery_pb2.DeltaDiscoveryResponse) -> None:
        t = response.type_url
        held = self.types.get(t)
        if held is None:
            return
        held.nonce = response.nonce
        ack = discovery_pb2.DeltaDiscoveryRequest(type_url=t, response_nonce=response.nonce)
        error = self._refused(t, response)
        if error is not None:
            ack.error_detail.CopyFrom(status_pb2.Status(code=3, message=error))
        else:
            for r in response.resources:
                held.resource_versions[r.name] = r.version
            for name in response.removed_resources:
                held.resource_versions.pop(name, None)
        await self._send(ack)
        self._answered(t, response.system_version_info, error)

    def holds(self, versions: Versions | Target) -> bool:
        target = versions if isinstance(versions, Target) else Target.of(versions)
        held = self.types.get(SIDECAR)
        if held is None or target.snapshot is None or "*" in held.names:
            return super().holds(target)
        # Subscribed by name: nothing is sent when an edit leaves those listeners alone, so the
        # type's version says nothing; the resources' do.
        served = target.snapshot.named(SIDECAR)
        return all(held.resource_versions.get(n) == (r.version if (r := served.get(n)) else None) for n in held.names)


@dataclass
class _Waiter:
    target: Target
    left: set[Node]
    done: asyncio.Future[None]


class Fleet:
    """``envoys`` Envoy-like and ``sidecars`` sidecar-like nodes against one control plane."""

    def __init__(
        self,
        address: str,
        *,
        envoys: int = 0,
        sidecars: int = 0,
        listeners: Sequence[str] = (),
        stalled: int = 0,
        stalled_sidecars: int = 0,
        prefix: str = "sim",
        cluster: str = "vllm-sr",
        credentials: grpc.ChannelCredentials | None = None,
        backoff: tuple[float, float] = (0.05, 1.0),
        refuse: Refuse | None = None,
    ) -> None:
        """``listeners``: what each sidecar subscribes to (every listener when empty).
        ``stalled``, ``stalled_sidecars``: how many Envoys and sidecars stop reading on ``stall()``;
        their receive window is kept small, so that a response or two fills it."""
        self.address = address
        self.cluster = cluster
        self.sidecar_names = tuple(f"sidecar/{name}" for name in listeners) or ("*",)
        kw: dict[str, Any] = {"credentials": credentials, "backoff": backoff, "refuse": refuse}
        self.envoys = [EnvoyNode(self, f"{prefix}-envoy-{i}", **kw) for i in range(envoys)]
        self.sidecars = [SidecarNode(self, f"{prefix}-sidecar-{i}", **kw) for i in range(sidecars)]
        self.nodes: list[Node] = [*self.envoys, *self.sidecars]
        self.stalled_names = {n.name for n in [*self.envoys[:stalled], *self.sidecars[:stalled_sidecars]]}
        self._waiters: list[_Waiter] = []
        # Decoded once per distinct resource, however many nodes receive it.
        self._names: dict[tuple[str, bytes], str] = {}
        self._derived: dict[tuple[str, bytes], tuple[str, ...]] = {}
        self._decoded: dict[bytes, Any] = {}
        self._named: dict[int, tuple[Any, dict[str, bytes]]] = {}

    async def __aenter__(self) -> Fleet:
        for node in self.nodes:
            node.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(node.close() for node in self.nodes))

    @property
    def stalled(self) -> list[Node]:
        return [n for n in self.nodes if n.name in self.stalled_names]

    def stall(self) -> None:
        """The stalled nodes stop reading (call once they are in step)."""
        for node in self.stalled:
            node.stop_reading()

    # -- in step

    async def in_step(self, versions: Versions, timeout: float, nodes: Iterable[Node] | None = None) -> None:
        """Wait until every node (of ``nodes``) holds ``versions``; TimeoutError names who does not."""
        want = Target.of(versions)
        left = {n for n in (self.nodes if nodes is None else nodes) if not n.holds(want)}
        if not left:
            return
        waiter = _Waiter(want, left, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.done), timeout)
        except TimeoutError:
            names = sorted(n.name for n in waiter.left)
            shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            raise TimeoutError(f"{len(names)} nodes not in step after {timeout} s: {shown}") from None
        finally:
            self._waiters.remove(waiter)

    def in_step_at(self, versions: Versions, nodes: Iterable[Node] | None = None) -> dict[str, float]:
        """Node name -> when it took the last of ``versions``, for the nodes that hold them."""
        want = Target.of(versions)
        return {n.name: n.since(want) for n in (self.nodes if nodes is None else nodes) if n.holds(want)}

    def _moved(self, node: Node) -> None:
        for waiter in self._waiters:
            if node in waiter.left and node.holds(waiter.target):
                waiter.left.discard(node)
                if not waiter.left and not waiter.done.done():
                    waiter.done.set_result(None)

    # -- reading resources, once each

    def open_stream(self, channel: grpc.aio.Channel, delta: bool) -> Any:
        """An ADS call whose responses are decoded once per distinct bytes for the whole process.

        Nodes in step get the same bytes (same content, same nonce: nonces count per stream);
        real Envoys each decode on CPUs of their own, simulated ones share the host's, so
        decoding each copy would measure the simulator, not the control plane."""
        name, kind, request = (
            ("DeltaAggregatedResources", discovery_pb2.DeltaDiscoveryResponse, discovery_pb2.DeltaDiscoveryRequest)
            if delta
            else ("StreamAggregatedResources", discovery_pb2.DiscoveryResponse, discovery_pb2.DiscoveryRequest)
        )

        def decode(data: bytes) -> Any:
            message = self._decoded.get(data)
            if message is None:
                if len(self._decoded) > 256:
                    self._decoded.clear()
                message = self._decoded[data] = kind.FromString(data)
            return message

        method = channel.stream_stream(
            f"/{_SERVICE}/{name}", request_serializer=request.SerializeToString, response_deserializer=decode
        )
        return method()

    def named(self, response: discovery_pb2.DiscoveryResponse) -> dict[str, bytes]:
        """A SotW response's resources by name, read once per response."""
        found = self._named.get(id(response))
        if found is None or found[0] is not response:
            if len(self._named) > 256:
                self._named.clear()
            t = response.type_url
            found = self._named[id(response)] = (response, {self.name_of(t, r): r.value for r in response.resources})
        return found[1]

    def name_of(self, t: str, packed: any_pb2.Any) -> str:
        key = (t, packed.value)
        name = self._names.get(key)
        if name is None:
            decoded = _MESSAGES[t].FromString(packed.value)
            name = decoded.cluster_name if t == ENDPOINT else decoded.name
            self._names[key] = name
            if t == CLUSTER:
                self._derived[key] = (decoded.name,) if decoded.type == _EDS else ()
            elif t == LISTENER:
                self._derived[key] = _routes_of(decoded)
        return name

    def eds_clusters(self, resources: Iterable[bytes]) -> tuple[str, ...]:
        return tuple(sorted({n for r in resources for n in self._derived.get((CLUSTER, r), ())}))

    def route_names(self, resources: Iterable[bytes]) -> tuple[str, ...]:
        return tuple(sorted({n for r in resources for n in self._derived.get((LISTENER, r), ())}))


def _routes_of(listener: Any) -> tuple[str, ...]:
    out = []
    for chain in listener.filter_chains:
        for f in chain.filters:
            if f.typed_config.type_url == _HCM:
                hcm = http_connection_manager_pb2.HttpConnectionManager.FromString(f.typed_config.value)
                if hcm.HasField("rds"):
                    out.append(hcm.rds.route_config_name)
    return tuple(out)


@dataclass(frozen=True)
class Target:
    """What in step means: a version per type URL, and the snapshot when there is one."""

    types: Mapping[str, str]
    snapshot: Snapshot | None = None

    @classmethod
    def of(cls, versions: Versions) -> Target:
        if isinstance(versions, Snapshot):
            return cls({t: versions.type_version(t) for t in TYPE_NAMES}, versions)
        return cls({_BY_NAME.get(t, t): v for t, v in versions.items()})


__all__ = ["Ack", "EnvoyNode", "Fleet", "Held", "Node", "SidecarNode", "Versions"]
