"""The cache's counts of who lags agree with a walk over every node, whatever the nodes report, and
a stream waiting for a version is woken once the others hold it (or it waits for a newer one)."""

from __future__ import annotations

import random

from envoy.config.core.v3 import base_pb2

from sr_control.compiler.protos import ROUTE, SIDECAR
from sr_control.xds.cache import SnapshotCache

VERSIONS = ("v1", "v2", "v3")


def test_counts_agree_with_naming_the_nodes_through_joins_reports_and_leaves() -> None:
    rng = random.Random(27)
    cache = SnapshotCache()
    nodes = {i: base_pb2.Node(id=f"node-{i}") for i in range(1, 40)}
    joined: set[int] = set()
    for _ in range(2_000):
        sid = rng.choice(list(nodes))
        action = rng.random()
        if sid not in joined:
            cache.join(nodes[sid], sid, lambda: None)
            joined.add(sid)
        elif action < 0.1:
            cache.leave(sid)
            joined.discard(sid)
        else:
            types = rng.sample([ROUTE, SIDECAR], rng.randint(0, 2))
            made = {t: rng.choice(VERSIONS) for t in types if rng.random() < 0.8}
            settled = {t: rng.choice(VERSIONS) for t in types if rng.random() < 0.5}
            cache.report(sid, made=made, settled=settled, subscribed=types)
        asker = rng.choice(list(nodes))
        for t in (ROUTE, SIDECAR):
            for version in VERSIONS:
                for settled_ in (False, True):
                    named = cache.lagging(nodes[asker], t, version, settled=settled_, exclude=asker)
                    counted = cache.lagging_count(nodes[asker], t, version, settled=settled_, exclude=asker)
                    assert counted == len(named)


def test_a_waiting_stream_is_woken_once_every_other_holds_the_version_and_not_for_an_older_one() -> None:
    cache = SnapshotCache()
    woken: list[str] = []
    envoy, sidecars = base_pb2.Node(id="envoy"), [base_pb2.Node(id=f"sidecar-{i}") for i in range(3)]
    cache.join(envoy, 1, lambda: woken.append("envoy"))
    for i, node in enumerate(sidecars, start=2):
        cache.join(node, i, lambda: None)
        cache.report(i, made={}, settled={}, subscribed=[SIDECAR])
    cache.wait_until(1, SIDECAR, "v1", settled=False, every=True)
    cache.report(2, made={SIDECAR: "v1"}, settled={}, subscribed=[SIDECAR])
    cache.report(3, made={SIDECAR: "v1"}, settled={}, subscribed=[SIDECAR])
    assert woken == []  # one sidecar still lacks v1
    cache.wait_until(1, SIDECAR, "v2", settled=False, every=True)  # a newer version came meanwhile
    cache.report(4, made={SIDECAR: "v1"}, settled={}, subscribed=[SIDECAR])
    assert woken == []  # v1 is no longer what it waits for
    for i in (2, 3, 4):
        cache.report(i, made={SIDECAR: "v2"}, settled={}, subscribed=[SIDECAR])
    assert woken == ["envoy"]
