"""The push path at fleet scale, over real gRPC with simulated nodes: a node that never reads holds
no other back; each response is serialized once, however many nodes it goes to; a burst of
edits wakes the streams once.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Iterator

import pytest

from sr_control.xds.cache import ALL_NODES, SnapshotCache
from sr_control.xds.hooks import Hooks
from sr_control.xds.ledger import Ledger
from sr_control.xds.metrics import Metrics
from sr_control.xds.server import AdsServer, AdsService, make_server
from sr_control.xds.snapshot import Snapshot
from tests.fleet.nodes import Fleet
from tests.xds.xds_support import NODE, snapshot, wait_for

# Enough listeners that one listener response is many times a stalled node's receive window.
LISTENERS = 40


@functools.cache
def config(generation: int) -> Snapshot:
    """Generation ``generation`` of the config: one listener more each time (new listeners, routes
    and sidecar data, never a version served before; nothing removed, which would wait for every
    node to let go of it)."""
    ports = {f"l{i}": 20000 + i for i in range(LISTENERS)} | {f"g{g}": 30000 + g for g in range(generation)}
    return snapshot(ports, generation)


class Plane:
    def __init__(self) -> None:
        self.cache, self.ledger, self.metrics = SnapshotCache(), Ledger(), Metrics()
        self.cache.set_snapshot(ALL_NODES, config(1))
        service = AdsService(self.cache, Hooks.chain(self.ledger.hooks(), self.metrics.hooks()))
        self.server: AdsServer
        self.server, port = make_server(service, "127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self.server.start()

    def encoded_bytes(self) -> float:
        """What ``/metrics`` shows as serialized, over every type."""
        text = self.metrics.text().decode()
        return sum(float(v) for v in re.findall(r"^vsr_xds_encoded_bytes_total\{[^}]*\} (\S+)$", text, re.M))


@pytest.fixture
def plane() -> Iterator[Plane]:
    p = Plane()
    yield p
    p.server.stop(grace=None)


@pytest.mark.parametrize("slow", ["envoy", "sidecar"])
def test_a_node_that_never_reads_does_not_hold_back_the_others(plane: Plane, slow: str) -> None:
    """A stalled Envoy (state of the world) or sidecar (delta): every other node takes three edits
    in a row while the stalled one, pushed each time it could be, has ACKed none of them. (With a
    stalled sidecar each edit's routes wait ``GATE_WAIT`` for it to hold their data, then go:
    stream.py.)"""

    async def run() -> None:
        stalled = {"stalled": 1} if slow == "envoy" else {"stalled_sidecars": 1}
        async with Fleet(plane.address, envoys=6, sidecars=3, **stalled) as fleet:  # type: ignore[arg-type]
            await fleet.in_step(config(1), timeout=10)
            fleet.stall()
            (stuck,) = fleet.stalled
            others = [n for n in fleet.nodes if n is not stuck]
            for generation in (2, 3, 4):
                plane.cache.set_snapshot(ALL_NODES, config(generation))
                await fleet.in_step(config(generation), timeout=10, nodes=others)
                assert not stuck.holds(config(generation))
            (entry,) = [n for n in plane.ledger.nodes() if n["id"] == stuck.name]
            # The control plane sent it the edit; it never answered.
            assert any(t["pushed"] != t["acked"] for t in entry["types"].values())

    asyncio.run(asyncio.wait_for(run(), 60))


def test_an_edit_serializes_the_same_bytes_for_10_nodes_as_for_100() -> None:
    async def bytes_per_edit(nodes: int) -> float:
        plane = Plane()
        try:
            async with Fleet(plane.address, envoys=nodes - nodes // 5, sidecars=nodes // 5) as fleet:
                await fleet.in_step(config(1), timeout=30)
                before = plane.encoded_bytes()
                plane.cache.set_snapshot(ALL_NODES, config(2))
                await fleet.in_step(config(2), timeout=30)
                return plane.encoded_bytes() - before
        finally:
            plane.server.stop(grace=None)

    few, many = asyncio.run(bytes_per_edit(10)), asyncio.run(bytes_per_edit(100))
    assert few > 0
    assert many == few


def test_snapshots_within_the_window_after_a_push_wake_the_streams_once_more_not_once_each() -> None:
    cache = SnapshotCache()
    cache.debounce = 0.5
    woken: list[int] = []
    cache.join(NODE, 1, lambda: woken.append(1))
    first, *burst = [config(generation) for generation in (1, 2, 3, 4)]
    cache.set_snapshot(ALL_NODES, first)
    assert woken == [1]  # after a quiet spell: at once
    for later in burst:
        cache.set_snapshot(ALL_NODES, later)
    assert woken == [1]  # held for the window
    wait_for(lambda: len(woken) == 2, what="the window to end")
    assert cache.snapshot(NODE).generation == 4  # type: ignore[union-attr]  # the newest, once
