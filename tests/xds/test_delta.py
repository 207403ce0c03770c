"""An incremental (delta) stream, request by request, without gRPC in between."""

from __future__ import annotations

import pytest
from envoy.service.discovery.v3 import discovery_pb2

from sr_control.compiler.protos import LISTENER, ROUTE
from sr_control.xds.cache import ALL_NODES, SnapshotCache
from sr_control.xds.delta import DeltaStream
from sr_control.xds.hooks import Hooks, StreamInfo
from tests.xds.xds_support import NODE, snapshot

SCHEMA_50 = "{systemone: {schema: vllm-sr/5.0}}"
SCHEMA_40 = "{systemone: {schema: vllm-sr/4.0}}"


def req(
    type_url: str,
    subscribe: tuple[str, ...] = (),
    nonce: str = "",
    error: str = "",
    initial: dict[str, str] | None = None,
    unsubscribe: tuple[str, ...] = (),
) -> discovery_pb2.DeltaDiscoveryRequest:
    r = discovery_pb2.DeltaDiscoveryRequest(
        node=NODE,
        type_url=type_url,
        resource_names_subscribe=list(subscribe),
        resource_names_unsubscribe=list(unsubscribe),
        response_nonce=nonce,
        initial_resource_versions=initial or {},
    )
    if error:
        r.error_detail.message = error
    return r


@pytest.fixture
def cache() -> SnapshotCache:
    c = SnapshotCache()
    c.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802}))
    return c


@pytest.fixture
def events() -> list[tuple[str, ...]]:
    return []


@pytest.fixture
def stream(cache: SnapshotCache, events: list[tuple[str, ...]]) -> DeltaStream:
    hooks = Hooks(
        acked=lambda i, t, v: events.append(("ack", t)),
        resumed=lambda i, t, v: events.append(("resumed", t)),
        nacked=lambda i, t, v, m: events.append(("nack", t, m)),
    )
    # No sidecar here: a node that reconnects is moved at once (test_order.py holds the wait for one).
    return DeltaStream(StreamInfo(1, "delta", "test"), cache, hooks, lambda: events.append(("wake",)), resync_wait=0)


def names(response: discovery_pb2.DeltaDiscoveryResponse) -> list[str]:
    return [r.name for r in response.resources]


def test_an_empty_first_listener_request_subscribes_to_everything(stream: DeltaStream) -> None:
    (response,) = stream.on_request(req(LISTENER))
    assert names(response) == ["listener/a", "listener/b"]
    assert all(r.version for r in response.resources)


def test_only_what_changed_is_sent(stream: DeltaStream, cache: SnapshotCache) -> None:
    (first,) = stream.on_request(req(ROUTE, subscribe=("route/a", "route/b")))
    stream.on_request(req(ROUTE, nonce=first.nonce))
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802}, 2, apis=SCHEMA_40))
    changed = snapshot({"a": 8801, "b": 8802}, 3, apis=SCHEMA_50)
    cache.set_snapshot(ALL_NODES, changed)
    (update,) = stream.on_push()
    assert names(update) == ["route/a", "route/b"]
    assert update.system_version_info == changed.type_version(ROUTE)


def test_a_removed_listener_is_named_as_removed(stream: DeltaStream, cache: SnapshotCache) -> None:
    (first,) = stream.on_request(req(LISTENER))
    stream.on_request(req(LISTENER, nonce=first.nonce))
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801}, 2))
    (update,) = stream.on_push()
    assert list(update.removed_resources) == ["listener/b"]
    assert names(update) == []


def test_after_a_nack_the_next_version_resends_all_the_node_lacks(
    stream: DeltaStream, cache: SnapshotCache, events: list[tuple[str, ...]]
) -> None:
    (first,) = stream.on_request(req(LISTENER))
    stream.on_request(req(LISTENER, nonce=first.nonce))
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802, "c": 8803}, 2))
    (refused,) = stream.on_push()
    assert names(refused) == ["listener/c"]
    assert stream.on_request(req(LISTENER, nonce=refused.nonce, error="cannot bind")) == []
    assert ("nack", LISTENER, "cannot bind") in events
    # The node still lacks c: a later snapshot that keeps c sends it again with the new one.
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802, "c": 8803, "d": 8804}, 3))
    (update,) = stream.on_push()
    assert names(update) == ["listener/c", "listener/d"]


def test_a_node_reconnecting_with_every_version_is_sent_nothing(
    stream: DeltaStream, cache: SnapshotCache, events: list[tuple[str, ...]]
) -> None:
    held = {r.name: r.version for r in cache.snapshot(NODE).resources[LISTENER]}  # type: ignore[union-attr]
    assert stream.on_request(req(LISTENER, initial=held)) == []
    assert ("resumed", LISTENER) in events


def test_a_node_reconnecting_with_some_versions_is_sent_the_rest(stream: DeltaStream, cache: SnapshotCache) -> None:
    held = {r.name: r.version for r in cache.snapshot(NODE).resources[LISTENER]}  # type: ignore[union-attr]
    held["listener/b"] = "old"
    held["listener/gone"] = "old"
    (response,) = stream.on_request(req(LISTENER, initial=held))
    assert names(response) == ["listener/b"]
    assert list(response.removed_resources) == ["listener/gone"]


def test_unsubscribed_routes_are_forgotten(stream: DeltaStream) -> None:
    (first,) = stream.on_request(req(ROUTE, subscribe=("route/a",)))
    assert names(first) == ["route/a"]
    stream.on_request(req(ROUTE, nonce=first.nonce, unsubscribe=("route/a",)))
    (again,) = stream.on_request(req(ROUTE, subscribe=("route/a",)))
    assert names(again) == ["route/a"]  # resubscribing sends it afresh


def test_a_change_wakes_the_stream(stream: DeltaStream, cache: SnapshotCache, events: list[tuple[str, ...]]) -> None:
    stream.on_request(req(LISTENER))
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801}, 2))
    assert ("wake",) in events
