"""A state-of-the-world stream, request by request, without gRPC in between."""

from __future__ import annotations

import pytest

from sr_control.compiler import compile
from sr_control.compiler.protos import CLUSTER, LISTENER, ROUTE, RouteConfiguration
from sr_control.config.load import load_text
from sr_control.xds.cache import ALL_NODES, SnapshotCache
from sr_control.xds.hooks import Hooks, StreamInfo
from sr_control.xds.snapshot import Snapshot
from sr_control.xds.sotw import SotwStream
from tests.xds.xds_support import config_text, snapshot
from tests.xds.xds_support import sotw_request as req


def route_names(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [RouteConfiguration.FromString(r.value).name for r in response.resources]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def hooks(self) -> Hooks:
        return Hooks(
            acked=lambda i, t, v: self.events.append(("ack", t, v)),
            resumed=lambda i, t, v: self.events.append(("resumed", t, v)),
            nacked=lambda i, t, v, m: self.events.append(("nack", t, v, m)),
        )


@pytest.fixture
def cache() -> SnapshotCache:
    c = SnapshotCache()
    c.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802}))
    return c


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def pushes() -> list[str]:
    return []


@pytest.fixture
def stream(cache: SnapshotCache, recorder: Recorder, pushes: list[str]) -> SotwStream:
    # No sidecar here: a node that reconnects is moved at once (test_order.py holds the wait for one).
    return SotwStream(
        StreamInfo(1, "sotw", "test"), cache, recorder.hooks(), lambda: pushes.append("wake"), resync_wait=0
    )


def test_the_first_request_gets_every_resource_of_its_type(stream: SotwStream, cache: SnapshotCache) -> None:
    (response,) = stream.on_request(req(LISTENER))
    assert response.version_info == cache.snapshot(stream.info.node).type_version(LISTENER)  # type: ignore[union-attr]
    assert len(response.resources) == 2
    assert response.nonce


def test_a_change_is_pushed_after_the_ack(
    stream: SotwStream, cache: SnapshotCache, recorder: Recorder, pushes: list[str]
) -> None:
    (first,) = stream.on_request(req(LISTENER))
    assert stream.on_request(req(LISTENER, first.version_info, first.nonce)) == []
    assert ("ack", LISTENER, first.version_info) in recorder.events
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802, "c": 8803}, 2))
    assert pushes == ["wake"]
    (second,) = stream.on_push()
    assert len(second.resources) == 3
    assert second.version_info != first.version_info


def test_a_type_that_did_not_change_is_not_pushed(stream: SotwStream, cache: SnapshotCache) -> None:
    (first,) = stream.on_request(req(CLUSTER))
    stream.on_request(req(CLUSTER, first.version_info, first.nonce))
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802, "c": 8803}, 2))
    assert stream.on_push() == []


def test_a_nack_is_reported_and_the_refused_version_not_sent_again(
    stream: SotwStream, cache: SnapshotCache, recorder: Recorder, pushes: list[str]
) -> None:
    (first,) = stream.on_request(req(LISTENER))
    stream.on_request(req(LISTENER, first.version_info, first.nonce))
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802, "c": 8803}, 2))
    (refused,) = stream.on_push()
    assert stream.on_request(req(LISTENER, first.version_info, refused.nonce, error="cannot bind 127.0.0.1:8803")) == []
    assert ("nack", LISTENER, refused.version_info, "cannot bind 127.0.0.1:8803") in recorder.events
    assert stream.on_push() == []  # the refused version is not sent again
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802, "d": 8804}, 3))
    (next_version,) = stream.on_push()
    assert len(next_version.resources) == 3


def test_a_request_answering_an_older_response_is_ignored(stream: SotwStream, cache: SnapshotCache) -> None:
    (first,) = stream.on_request(req(LISTENER))
    stream.on_request(req(LISTENER, first.version_info, first.nonce))
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801}, 2))
    stream.on_push()
    assert stream.on_request(req(LISTENER, first.version_info, first.nonce)) == []


def test_a_node_reconnecting_with_the_served_version_is_sent_nothing(
    stream: SotwStream, cache: SnapshotCache, recorder: Recorder
) -> None:
    held = cache.snapshot(stream.info.node).type_version(CLUSTER)  # type: ignore[union-attr]
    assert stream.on_request(req(CLUSTER, version=held)) == []
    assert recorder.events == [("resumed", CLUSTER, held)]


def test_a_node_reconnecting_with_an_old_version_is_sent_the_current_one(stream: SotwStream) -> None:
    (response,) = stream.on_request(req(CLUSTER, version="an-old-version"))
    assert response.version_info != "an-old-version"


def test_routes_are_sent_for_the_names_asked_and_again_when_the_names_change(stream: SotwStream) -> None:
    (first,) = stream.on_request(req(ROUTE, names=("route/a",)))
    assert [r.type_url for r in first.resources] == [ROUTE]
    (second,) = stream.on_request(req(ROUTE, first.version_info, first.nonce, names=("route/a", "route/b")))
    assert route_names(second) == ["route/b"]  # the node holds route/a already


def test_a_route_change_sends_that_route_table_alone_and_listeners_whole(
    stream: SotwStream, cache: SnapshotCache
) -> None:
    names = ("route/a", "route/b")
    answers = {}
    for t in (LISTENER, ROUTE):
        (first,) = stream.on_request(req(t, names=names if t == ROUTE else ()))
        answers[t] = first
        stream.on_request(req(t, first.version_info, first.nonce, names=names if t == ROUTE else ()))
    text = config_text({"a": 8801, "b": 8802}).replace(
        "port: 8802, apis: {chat_completions: {}}", "port: 8803, apis: {chat_completions: {}, responses: {}}"
    )
    cache.set_snapshot(ALL_NODES, Snapshot.of(compile(load_text(text)), 2))
    (listeners,) = stream.on_push()
    assert listeners.type_url == LISTENER and len(listeners.resources) == 2  # listeners: the whole state, always
    (routes,) = stream.on_request(req(LISTENER, listeners.version_info, listeners.nonce))
    assert route_names(routes) == ["route/b"]
    assert routes.version_info == cache.snapshot(stream.info.node).type_version(ROUTE)  # type: ignore[union-attr]


def test_before_any_snapshot_a_request_waits_for_the_first(recorder: Recorder, pushes: list[str]) -> None:
    cache = SnapshotCache()
    stream = SotwStream(StreamInfo(1, "sotw", "test"), cache, recorder.hooks(), lambda: pushes.append("wake"))
    assert stream.on_request(req(LISTENER)) == []
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801}))
    assert pushes == ["wake"]
    (response,) = stream.on_push()
    assert len(response.resources) == 1


def test_closing_the_stream_leaves_the_cache(stream: SotwStream, cache: SnapshotCache) -> None:
    (first,) = stream.on_request(req(LISTENER))
    stream.on_request(req(LISTENER, first.version_info, first.nonce))
    assert cache.streams() == 1
    stream.close()
    assert cache.streams() == 0
