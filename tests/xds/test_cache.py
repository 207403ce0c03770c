"""The snapshot cache: one owner of snapshots and watches; a watch fires once, on a change."""

from __future__ import annotations

from sr_control.compiler.protos import CLUSTER, LISTENER
from sr_control.xds.cache import ALL_NODES, SnapshotCache
from sr_control.xds.snapshot import Snapshot
from tests.xds.xds_support import NODE, snapshot


def test_a_watch_at_the_current_version_waits_and_fires_once_on_a_change() -> None:
    cache = SnapshotCache()
    first = snapshot({"a": 8801})
    cache.set_snapshot(ALL_NODES, first)
    fired: list[Snapshot] = []
    cancel = cache.watch(NODE, LISTENER, first.type_version(LISTENER), fired.append)
    assert cancel is not None and fired == []
    second = snapshot({"a": 8801, "b": 8802}, 2)
    assert cache.set_snapshot(ALL_NODES, second) == 1
    assert fired == [second]
    cache.set_snapshot(ALL_NODES, snapshot({"c": 8803}, 3))
    assert fired == [second]  # dropped after firing: the next request opens the next watch


def test_a_watch_at_an_old_version_is_answered_at_once() -> None:
    cache = SnapshotCache()
    current = snapshot({"a": 8801})
    cache.set_snapshot(ALL_NODES, current)
    fired: list[Snapshot] = []
    assert cache.watch(NODE, LISTENER, "old", fired.append) is None
    assert fired == [current]


def test_a_new_snapshot_fires_only_the_types_it_changes() -> None:
    cache = SnapshotCache()
    first = snapshot({"a": 8801})
    cache.set_snapshot(ALL_NODES, first)
    fired: list[str] = []
    for type_url in (CLUSTER, LISTENER):
        cache.watch(NODE, type_url, first.type_version(type_url), lambda s, t=type_url: fired.append(t))
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802}, 2))
    assert fired == [LISTENER]
    assert cache.open_watches() == 1


def test_a_cancelled_watch_never_fires() -> None:
    cache = SnapshotCache()
    fired: list[Snapshot] = []
    cancel = cache.watch(NODE, LISTENER, "", fired.append)
    assert cancel is not None
    cancel()
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801}))
    assert fired == []


def test_nodes_can_be_grouped_by_a_key_function() -> None:
    cache = SnapshotCache(node_key=lambda node: node.cluster)
    cache.set_snapshot("test", snapshot({"a": 8801}))
    assert cache.snapshot(NODE) is not None
    cache_other = SnapshotCache(node_key=lambda node: "elsewhere")
    cache_other.set_snapshot("test", snapshot({"a": 8801}))
    assert cache_other.snapshot(NODE) is None
