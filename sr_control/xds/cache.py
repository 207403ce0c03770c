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
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from envoy.config.core.v3 import base_pb2

from sr_control.xds.encoded import Encoder
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
    awaiting: tuple[str, bool, str, bool] | None = None  # what it waits for (``wait_until``), if anything

    def at(self, settled: bool) -> Mapping[str, str]:
        return self.settled if settled else self.made


# What a stream waits for: (type URL, settled, version, every: all others there, or else any one).
Awaited = tuple[str, bool, str, bool]


@dataclass
class _Group:
    """Counts over a group's members, so that "who lags" is a lookup, not a walk over every node."""

    subscribed: Counter[str] = field(default_factory=Counter)  # type -> members subscribed to it
    # (type, settled) -> version -> members subscribed to the type and at that version.
    at: dict[tuple[str, bool], Counter[str]] = field(default_factory=dict)
    waiting: set[int] = field(default_factory=set)  # woken by any progress (``wait``)
    # Woken once what they wait for holds (``wait_until``): awaited -> stream -> its member.
    until: dict[Awaited, dict[int, _Member]] = field(default_factory=dict)

    def count(self, m: _Member, sign: int, types: Iterable[str] | None = None) -> None:
        """Add (+1) or take away (-1) ``m``'s part in the counts, of ``types`` (default: all)."""
        for t in m.subscribed if types is None else m.subscribed.intersection(types):
            self.subscribed[t] += sign
            for settled in (False, True):
                version = m.at(settled).get(t)
                if version is not None:
                    at = self.at.get((t, settled))
                    if at is None:
                        at = self.at[(t, settled)] = Counter()
                    at[version] += sign

    def lagging(self, t: str, version: str, settled: bool, exclude: _Member | None) -> int:
        at = self.at.get((t, settled))
        n = self.subscribed[t] - (at[version] if at is not None else 0)
        if exclude is not None and t in exclude.subscribed and exclude.at(settled).get(t) != version:
            n -= 1
        return n

    def holding(self, t: str, version: str, exclude: _Member | None) -> int:
        at = self.at.get((t, False))
        n = at[version] if at is not None else 0
        if exclude is not None and t in exclude.subscribed and exclude.made.get(t) == version:
            n -= 1
        return n

    def forget(self, awaited: Awaited, stream: int) -> None:
        waiters = self.until.get(awaited)
        if waiters is not None:
            waiters.pop(stream, None)
            if not waiters:
                del self.until[awaited]

    def met(self, awaited: Awaited, exclude: _Member) -> bool:
        t, settled, version, every = awaited
        if every:
            return self.lagging(t, version, settled, exclude) == 0
        return self.holding(t, version, exclude) > 0


class SnapshotCache:
    def __init__(self, node_key: NodeKey = every_node) -> None:
        self.node_key = node_key
        self._lock = threading.Lock()
        self._snapshots: dict[str, Snapshot] = {}
        self._members: dict[int, _Member] = {}
        self._groups: dict[str, _Group] = {}
        self.started = time.monotonic()  # nodes that held a config before it reconnect meanwhile
        self.encoder = Encoder()  # response bodies, shared by every stream that sends the same
        # Snapshots within this long of a group's last wake-up wake it once, when the window ends.
        self.debounce = 0.0  # the server sets its own (server.DEBOUNCE)
        self._woken: dict[str, float] = {}  # group -> when its streams were last woken for a snapshot
        self._due: set[str] = set()  # groups whose wake-up waits for the window to end

    def set_snapshot(self, key: str, snapshot: Snapshot) -> int:
        """Store ``snapshot`` for group ``key`` and wake its streams. Returns how many.

        Within ``debounce`` seconds of the group's last wake-up, the streams are woken once, when
        that window ends, for however many snapshots came in it (each stream then moves to the
        newest); after a quiet spell, at once.
        """
        with self._lock:
            self._snapshots[key] = snapshot
            members = sum(1 for m in self._members.values() if m.group == key)
            if key in self._due:
                return members  # the window's wake-up is already set
            left = self._woken.get(key, -self.debounce) + self.debounce - time.monotonic()
            if left > 0:
                self._due.add(key)
                timer = threading.Timer(left, self._wake_group, (key,))
                timer.daemon = True
                timer.start()
                return members
        self._wake_group(key)
        return members

    def _wake_group(self, key: str) -> None:
        with self._lock:
            self._due.discard(key)
            self._woken[key] = time.monotonic()
            wake = [m.wake for m in self._members.values() if m.group == key]
        for w in wake:
            w()

    def snapshot(self, node: base_pb2.Node) -> Snapshot | None:
        with self._lock:
            return self._snapshots.get(self.node_key(node))

    # -- the streams of each group

    def join(self, node: base_pb2.Node, stream: int, wake: Wake) -> None:
        with self._lock:
            m = self._members[stream] = _Member(node.id, self.node_key(node), wake)
            self._groups.setdefault(m.group, _Group())

    def leave(self, stream: int) -> None:
        with self._lock:
            gone = self._members.pop(stream, None)
            if gone is None:
                return
            group = self._groups[gone.group]
            group.count(gone, -1)
            group.waiting.discard(stream)
            if gone.awaiting is not None:
                group.forget(gone.awaiting, stream)
            # A stream that waited on this one need not wait any more.
            wake = self._progress(group, gone.subscribed)
        for w in wake:
            w()

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
            group = self._groups[m.group]
            moved = {
                t
                for t in m.subscribed | subscribed
                if (m.made.get(t), m.settled.get(t)) != (made.get(t), settled.get(t))
            }
            moved |= m.subscribed ^ subscribed
            group.count(m, -1, moved)
            m.made, m.settled, m.subscribed = dict(made), dict(settled), subscribed
            group.count(m, +1, moved)
            wake = self._progress(group, moved)
        for w in wake:
            w()

    def wait(self, stream: int) -> None:
        """``stream`` waits on other streams: wake it when one of them reports progress."""
        with self._lock:
            m = self._members.get(stream)
            if m is not None:
                self._groups[m.group].waiting.add(stream)

    def wait_until(self, stream: int, type_url: str, version: str, *, settled: bool, every: bool) -> None:
        """Wake ``stream`` once every other stream subscribed to ``type_url`` is at ``version``
        (``every``), or once one is (made); see ``lagging`` and ``holding``."""
        awaited = (type_url, settled, version, every)
        with self._lock:
            m = self._members.get(stream)
            if m is None:
                return
            group = self._groups[m.group]
            if m.awaiting is not None and m.awaiting != awaited:
                group.forget(m.awaiting, stream)  # it waits for something else now (a newer version)
            m.awaiting = None
            if not group.met(awaited, m):
                group.until.setdefault(awaited, {})[stream] = m
                m.awaiting = awaited
                return
        m.wake()  # it holds already

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
                and m.at(settled).get(type_url) != version
            ]

    def lagging_count(self, node: base_pb2.Node, type_url: str, version: str, *, settled: bool, exclude: int) -> int:
        """How many nodes ``lagging`` would name, without naming them."""
        with self._lock:
            group = self._groups.get(self.node_key(node))
            return group.lagging(type_url, version, settled, self._members.get(exclude)) if group else 0

    def holding(self, node: base_pb2.Node, type_url: str, version: str, *, exclude: int) -> int:
        """How many other streams of ``node``'s group hold ``type_url``'s new resources of ``version``."""
        with self._lock:
            group = self._groups.get(self.node_key(node))
            return group.holding(type_url, version, self._members.get(exclude)) if group else 0

    def _progress(self, group: _Group, moved: Iterable[str]) -> list[Wake]:
        """The wake-ups due now that streams of ``group`` moved on the types ``moved``."""
        out = [self._members[sid].wake for sid in group.waiting if sid in self._members]
        group.waiting.clear()
        moved = set(moved)
        for awaited in [a for a in group.until if a[0] in moved]:
            waiters = group.until[awaited]
            t, settled, version, every = awaited
            # Counted over every member once; a waiter's own part is then the only difference.
            if every:
                left = group.lagging(t, version, settled, None)
                if left > 1:
                    continue  # others still lag, whoever waits
            else:
                left = group.holding(t, version, None)
                if left == 0:
                    continue  # nobody holds it
            for sid, m in list(waiters.items()):
                if group.met(awaited, m):
                    del waiters[sid]
                    m.awaiting = None
                    out.append(m.wake)
            if not waiters:
                del group.until[awaited]
        return out
