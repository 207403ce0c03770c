"""The snapshot cache: the one owner of group -> snapshot and of the open watches.

A watch is one stream's request for one type at the version it holds. ``set_snapshot`` answers
every watch whose version differs from the new snapshot's and drops it; the stream's next
request (its ACK) opens the next watch. So each push is answered before another is sent
(go-control-plane's ``SimpleCache``).

Nodes are grouped by ``node_key`` (default: one group for all), so a deployment that serves
different Envoys different configs can key them by node cluster or ID.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass

from envoy.config.core.v3 import base_pb2

from sr_control.xds.snapshot import Snapshot

ALL_NODES = "*"
NodeKey = Callable[[base_pb2.Node], str]
Respond = Callable[[Snapshot], None]


def every_node(node: base_pb2.Node) -> str:
    return ALL_NODES


@dataclass(frozen=True, slots=True, eq=False)
class Watch:
    type_url: str
    version: str  # the version the stream holds for this type; "" for none
    respond: Respond


class SnapshotCache:
    def __init__(self, node_key: NodeKey = every_node) -> None:
        self.node_key = node_key
        self._lock = threading.Lock()
        self._snapshots: dict[str, Snapshot] = {}
        self._watches: dict[str, dict[int, Watch]] = {}
        self._ids = itertools.count(1)

    def set_snapshot(self, key: str, snapshot: Snapshot) -> int:
        """Store ``snapshot`` for group ``key``; answer and drop the watches it changes. Returns their count."""
        with self._lock:
            self._snapshots[key] = snapshot
            watches = self._watches.get(key, {})
            fired = [(wid, w) for wid, w in watches.items() if snapshot.type_version(w.type_url) != w.version]
            for wid, _ in fired:
                del watches[wid]
        for _, w in fired:
            w.respond(snapshot)
        return len(fired)

    def snapshot(self, node: base_pb2.Node) -> Snapshot | None:
        with self._lock:
            return self._snapshots.get(self.node_key(node))

    def watch(self, node: base_pb2.Node, type_url: str, version: str, respond: Respond) -> Callable[[], None] | None:
        """Answer now if the snapshot differs from ``version``; else open a watch. Returns its cancel."""
        key = self.node_key(node)
        with self._lock:
            snapshot = self._snapshots.get(key)
            if snapshot is None or snapshot.type_version(type_url) == version:
                wid = next(self._ids)
                self._watches.setdefault(key, {})[wid] = Watch(type_url, version, respond)
                return lambda: self._cancel(key, wid)
        respond(snapshot)
        return None

    def open_watches(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._watches.values())

    def _cancel(self, key: str, wid: int) -> None:
        with self._lock:
            self._watches.get(key, {}).pop(wid, None)
