"""The snapshot cache: one owner of snapshots and of who is connected; it wakes streams on a change."""

from __future__ import annotations

from envoy.config.core.v3 import base_pb2

from sr_control.compiler.protos import ROUTE, SIDECAR
from sr_control.xds.cache import ALL_NODES, SnapshotCache
from tests.xds.xds_support import NODE, snapshot

SIDECAR_NODE = base_pb2.Node(id="sidecar-1", cluster="test")


def test_a_new_snapshot_wakes_every_stream_of_the_group() -> None:
    cache = SnapshotCache()
    woken: list[str] = []
    cache.join(NODE, 1, lambda: woken.append("envoy"))
    cache.join(SIDECAR_NODE, 2, lambda: woken.append("sidecar"))
    assert cache.set_snapshot(ALL_NODES, snapshot({"a": 8801})) == 2
    assert sorted(woken) == ["envoy", "sidecar"]
    cache.leave(1)
    cache.leave(2)
    assert cache.set_snapshot(ALL_NODES, snapshot({"a": 8801}, 2)) == 0


def test_lagging_names_the_nodes_not_yet_at_a_version_and_progress_wakes_who_waits() -> None:
    cache = SnapshotCache()
    woken: list[int] = []
    cache.join(NODE, 1, lambda: woken.append(1))
    cache.join(SIDECAR_NODE, 2, lambda: woken.append(2))
    cache.report(1, made={ROUTE: "v1"}, settled={ROUTE: "v1"}, subscribed=[ROUTE])
    cache.report(2, made={}, settled={}, subscribed=[SIDECAR])
    assert cache.lagging(NODE, SIDECAR, "v1", settled=False, exclude=1) == ["sidecar-1"]
    assert cache.lagging(NODE, ROUTE, "v1", settled=True, exclude=2) == []
    cache.wait(1)
    cache.report(2, made={SIDECAR: "v1"}, settled={}, subscribed=[SIDECAR])
    assert woken == [1]
    assert cache.lagging(NODE, SIDECAR, "v1", settled=False, exclude=1) == []
    cache.report(2, made={SIDECAR: "v1"}, settled={SIDECAR: "v1"}, subscribed=[SIDECAR])
    assert woken == [1]  # woken once: it waits again only if it asks to


def test_a_stream_that_leaves_no_longer_holds_others_back() -> None:
    cache = SnapshotCache()
    woken: list[int] = []
    cache.join(NODE, 1, lambda: woken.append(1))
    cache.join(SIDECAR_NODE, 2, lambda: None)
    cache.report(2, made={}, settled={}, subscribed=[SIDECAR])
    cache.wait(1)
    cache.leave(2)
    assert woken == [1]
    assert cache.lagging(NODE, SIDECAR, "v1", settled=False, exclude=1) == []


def test_nodes_can_be_grouped_by_a_key_function() -> None:
    cache = SnapshotCache(node_key=lambda node: node.cluster)
    cache.set_snapshot("test", snapshot({"a": 8801}))
    assert cache.snapshot(NODE) is not None
    cache_other = SnapshotCache(node_key=lambda node: "elsewhere")
    cache_other.set_snapshot("test", snapshot({"a": 8801}))
    assert cache_other.snapshot(NODE) is None
    woken: list[int] = []
    cache.join(base_pb2.Node(id="x", cluster="other"), 1, lambda: woken.append(1))
    cache.set_snapshot("test", snapshot({"a": 8801}, 2))
    assert woken == []  # another group's snapshot
