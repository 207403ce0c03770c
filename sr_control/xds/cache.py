"""The snapshot cache: the one owner of group -> snapshot, and of who is connected to each group.

Each open stream joins its node's group with a wake-up call. ``set_snapshot`` wakes every
stream of the group; each then moves its node to the new snapshot at its own pace, one
response per ACK (``stream.py``). Streams also report how far their node has got, per type, so
that a step that depends on other nodes (routes wait for the sidecars to hold their data) can
ask, and be woken when the answer may have changed.

Nodes are grouped by ``node_key`` (default: one group for all), so a deployment that serves
different Envoys different configs can key them by node cluster or ID.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from envoy.config.core.v3 import base_pb2

from sr_control.xds.snapshot import Snapshot

ALL_NODES = "*"
NodeKey = Callable[[base_pb2.Node], str]
Wake = Callable[[], None]


def every_node(node: base_pb2.Node) -> str:
    return ALL_NODES


@dataclass(eq=False)
class _Member:
    node: str  # the node ID, to name a node that lags
    group: str
    wake: Wake
    subscribed: frozenset[str] = frozenset()
    # type URL -> the snapshot version up to which the node holds that type's new and changed
    # resources (made), or exactly the snapshot's resources (settled).
    made: Mapping[str, str] = field(default_factory=dict)
    settled: Mapping[str, str] = field(default_factory=dict)
    waiting: bool = False


class SnapshotCache:
    def __init__(self, node_key: NodeKey = every_node) -> None:
        self.node_key = node_key
        self._lock = threading.Lock()
        self._snapshots: dict[str, Snapshot] = {}
        self._members: dict[int, _Member] = {}
        self.started = time.monotonic()  # nodes that held a config before it reconnect meanwhile

    def set_snapshot(self, key: str, snapshot: Snapshot) -> int:
        """Store ``snapshot`` for group ``key`` and wake its streams. Returns how many."""
        with self._lock:
            self._snapshots[key] = snapshot
            wake = [m.wake for m in self._members.values() if m.group == key]
        for w in wake:
            w()
        return len(wake)

    def snapshot(self, node: base_pb2.Node) -> Snapshot | None:
        with self._lock:
            return self._snapshots.get(self.node_key(node))

    # -- the streams of each group

    def join(self, node: base_pb2.Node, stream: int, wake: Wake) -> None:
        with self._lock:
            self._members[stream] = _Member(node.id, self.node_key(node), wake)

    def leave(self, stream: int) -> None:
        with self._lock:
            gone = self._members.pop(stream, None)
            wake = self._waiting(gone.group) if gone is not None else []
        for w in wake:
            w()  # a stream that waited on this one need not wait any more

    def streams(self) -> int:
        with self._lock:
            return len(self._members)

    def report(
        self, stream: int, *, made: Mapping[str, str], settled: Mapping[str, str], subscribed: Iterable[str]
    ) -> None:
        """How far ``stream``'s node has got; wakes the streams waiting on others when it moved."""
        with self._lock:
            m = self._members.get(stream)
            if m is None:
                return
            subscribed = frozenset(subscribed)
            if (m.made, m.settled, m.subscribed) == (made, settled, subscribed):
                return
            m.made, m.settled, m.subscribed = dict(made), dict(settled), subscribed
            wake = self._waiting(m.group)
        for w in wake:
            w()

    def wait(self, stream: int) -> None:
        """``stream`` waits on other streams: wake it when one of them reports progress."""
        with self._lock:
            m = self._members.get(stream)
            if m is not None:
                m.waiting = True

    def lagging(self, node: base_pb2.Node, type_url: str, version: str, *, settled: bool, exclude: int) -> list[str]:
        """The nodes of ``node``'s group subscribed to ``type_url`` that are not yet at ``version``."""
        key = self.node_key(node)
        with self._lock:
            return [
                m.node or f"stream {sid}"
                for sid, m in self._members.items()
                if sid != exclude
                and m.group == key
                and type_url in m.subscribed
                and (m.settled if settled else m.made).get(type_url) != version
            ]

    def holding(self, node: base_pb2.Node, type_url: str, version: str, *, exclude: int) -> int:
        """How many other streams of ``node``'s group hold ``type_url``'s new resources of ``version``."""
        key = self.node_key(node)
        with self._lock:
            return sum(
                1
                for sid, m in self._members.items()
                if sid != exclude and m.group == key and type_url in m.subscribed and m.made.get(type_url) == version
            )

    def _waiting(self, group: str) -> list[Wake]:
        out = []
        for m in self._members.values():
            if m.group == group and m.waiting:
                m.waiting = False
                out.append(m.wake)
        return out
