"""Make before break: the order one edit reaches a node, and a sidecar, one response per ACK.

The edit used throughout moves listener ``a``'s Responses API from provider model ``old`` to a
new model ``new``: Envoy must get cluster ``provider/new`` before the route naming it, the
sidecars the data of the routes' version before the routes, and lose ``provider/old`` only
after the route naming it is gone.
"""

from __future__ import annotations

from typing import Any

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2

from sr_control.compiler import compile
from sr_control.compiler.protos import CLUSTER, LISTENER, ROUTE, SIDECAR, Cluster, Listener, RouteConfiguration
from sr_control.config.load import load_text
from sr_control.xds.cache import ALL_NODES, SnapshotCache
from sr_control.xds.delta import DeltaStream
from sr_control.xds.hooks import Hooks, StreamInfo
from sr_control.xds.snapshot import Snapshot
from sr_control.xds.sotw import SotwStream
from tests.xds.xds_support import NODE, sotw_request, wait_for

SIDECAR_NODE = base_pb2.Node(id="sidecar-1", cluster="test")


def config(responses_model: str, *, listeners: tuple[str, ...] = ("a",)) -> Snapshot:
    rows = "\n".join(
        (
            f"  - {{name: {name}, address: 127.0.0.1, port: {8801 + i}, apis: {{chat_completions: {{models: "
            f"[m]}}, responses: {{models: [{responses_model}]}}}}}}"
        )
        for i, name in enumerate(listeners)
    )
    text = f"""version: 2
providers:
  models:
    - {{name: m, api_format: chat_completions, endpoints: ["http://127.0.0.1:9/v1"]}}
    - {{name: {responses_model}, api_format: responses, endpoints: ["http://127.0.0.1:9/v1"]}}
listeners:
{rows}
"""
    return Snapshot.of(compile(load_text(text)), 1)


BEFORE = config("old")
AFTER = config("new")


def names(response: discovery_pb2.DiscoveryResponse) -> list[str]:
    out = []
    for packed in response.resources:
        message = {CLUSTER: Cluster, LISTENER: Listener, ROUTE: RouteConfiguration}[response.type_url]()
        packed.Unpack(message)
        out.append(message.name)
    return sorted(out)


class Envoy:
    """A SotW Envoy holding clusters, listeners and routes of BEFORE, as it would after start."""

    def __init__(self, cache: SnapshotCache, woken: list[str] | None = None) -> None:
        wake = (lambda: woken.append("envoy")) if woken is not None else (lambda: None)
        # Old clusters go as soon as the routes moved (the grace has its own test below).
        self.stream = SotwStream(StreamInfo(1, "sotw", "envoy"), cache, Hooks(), wake, removal_grace=0)
        for t, names_ in ((CLUSTER, ()), (LISTENER, ()), (ROUTE, ("route/a",))):
            (response,) = self.stream.on_request(sotw_request(t, names=names_))
            assert self.ack(response) == []

    def ack(self, response: discovery_pb2.DiscoveryResponse, error: str = "") -> list[Any]:
        return self.stream.on_request(
            sotw_request(
                response.type_url,
                response.version_info,
                response.nonce,
                names=("route/a",) if response.type_url == ROUTE else (),
                error=error,
            )
        )

    def run(self) -> list[tuple[str, list[str]]]:
        """ACK everything until nothing more comes; what came, in order."""
        out = []
        pending = self.stream.on_push()
        while pending:
            (response,) = pending
            out.append((response.type_url, names(response)))
            pending = self.ack(response)
        return out


@pytest.fixture
def cache() -> SnapshotCache:
    c = SnapshotCache()
    c.set_snapshot(ALL_NODES, BEFORE)
    return c


def test_sotw_sends_new_clusters_then_routes_then_drops_the_old_cluster(cache: SnapshotCache) -> None:
    envoy = Envoy(cache)
    cache.set_snapshot(ALL_NODES, AFTER)
    steps = envoy.run()
    assert steps == [
        (CLUSTER, ["provider/m", "provider/new", "provider/old", "vsr/sidecar"]),  # the old one kept
        (ROUTE, ["route/a"]),
        (CLUSTER, ["provider/m", "provider/new", "vsr/sidecar"]),
    ]


def test_each_step_waits_for_the_ack_of_the_one_before(cache: SnapshotCache) -> None:
    envoy = Envoy(cache)
    cache.set_snapshot(ALL_NODES, AFTER)
    (clusters,) = envoy.stream.on_push()
    assert clusters.type_url == CLUSTER
    assert envoy.stream.on_push() == []  # Envoy ACKs a cluster update only once the clusters are warm
    (routes,) = envoy.ack(clusters)
    assert routes.type_url == ROUTE
    assert routes.version_info == AFTER.type_version(ROUTE)


def test_delta_adds_before_and_removes_after(cache: SnapshotCache) -> None:
    stream = DeltaStream(StreamInfo(1, "delta", "envoy"), cache, Hooks(), lambda: None, removal_grace=0)

    def request(t: str, nonce: str = "", subscribe: tuple[str, ...] = ()) -> list[Any]:
        return stream.on_request(
            discovery_pb2.DeltaDiscoveryRequest(
                node=NODE, type_url=t, response_nonce=nonce, resource_names_subscribe=list(subscribe)
            )
        )

    for t, subscribe in ((CLUSTER, ()), (LISTENER, ()), (ROUTE, ("route/a",))):
        (response,) = request(t, subscribe=subscribe)
        assert request(t, response.nonce) == []
    cache.set_snapshot(ALL_NODES, AFTER)
    steps = []
    pending = stream.on_push()
    while pending:
        (response,) = pending
        steps.append((response.type_url, [r.name for r in response.resources], list(response.removed_resources)))
        pending = request(response.type_url, response.nonce)
    assert steps == [(CLUSTER, ["provider/new"], []), (ROUTE, ["route/a"], []), (CLUSTER, [], ["provider/old"])]


def test_a_removed_listener_goes_before_its_routes_and_clusters(cache: SnapshotCache) -> None:
    two = config("old", listeners=("a", "b"))
    cache.set_snapshot(ALL_NODES, two)
    envoy = Envoy(cache)
    cache.set_snapshot(ALL_NODES, config("new"))
    order = [t for t, _ in envoy.run()]
    assert order == [CLUSTER, LISTENER, ROUTE, CLUSTER]


class Sidecar:
    """A sidecar subscribed to listener a's data over delta ADS."""

    def __init__(self, cache: SnapshotCache, woken: list[str]) -> None:
        self.stream = DeltaStream(StreamInfo(2, "delta", "sidecar"), cache, Hooks(), lambda: woken.append("sidecar"))
        first = discovery_pb2.DeltaDiscoveryRequest(
            node=SIDECAR_NODE, type_url=SIDECAR, resource_names_subscribe=["sidecar/a"]
        )
        (response,) = self.stream.on_request(first)
        self.ack(response)

    def ack(self, response: discovery_pb2.DeltaDiscoveryResponse) -> list[Any]:
        return self.stream.on_request(
            discovery_pb2.DeltaDiscoveryRequest(type_url=SIDECAR, response_nonce=response.nonce)
        )


def test_routes_wait_for_the_sidecar_to_hold_the_data_of_their_version(cache: SnapshotCache) -> None:
    woken: list[str] = []
    sidecar = Sidecar(cache, woken)
    envoy_woken: list[str] = []
    envoy = Envoy(cache, envoy_woken)
    cache.set_snapshot(ALL_NODES, AFTER)
    (clusters,) = envoy.stream.on_push()
    assert envoy.ack(clusters) == []  # the routes wait: the sidecar lacks their data
    (data,) = sidecar.stream.on_push()
    assert [r.version for r in data.resources] == [AFTER.resources.named(SIDECAR)["sidecar/a"].version]
    assert envoy.stream.on_push() == []  # sent is not enough: the sidecar must hold it
    envoy_woken.clear()
    sidecar.ack(data)
    assert envoy_woken == ["envoy"]  # the sidecar's ACK wakes the Envoy stream
    (routes,) = envoy.stream.on_push()
    assert routes.type_url == ROUTE


def test_a_sidecar_that_never_acks_holds_the_routes_back_only_for_a_while(cache: SnapshotCache) -> None:
    Sidecar(cache, [])
    envoy_woken: list[str] = []
    envoy = Envoy(cache, envoy_woken)
    envoy.stream._gate_wait = 0.05
    cache.set_snapshot(ALL_NODES, AFTER)
    (clusters,) = envoy.stream.on_push()
    envoy_woken.clear()
    assert envoy.ack(clusters) == []
    wait_for(lambda: envoy_woken, timeout=5, what="the bounded wait to end")
    (routes,) = envoy.stream.on_push()
    assert routes.type_url == ROUTE


def test_sidecar_data_is_removed_only_once_envoy_holds_routes_that_no_longer_name_it(cache: SnapshotCache) -> None:
    two = config("old", listeners=("a", "b"))
    cache.set_snapshot(ALL_NODES, two)
    woken: list[str] = []
    sidecar = DeltaStream(StreamInfo(2, "delta", "sidecar"), cache, Hooks(), lambda: woken.append("sidecar"))
    (data,) = sidecar.on_request(
        discovery_pb2.DeltaDiscoveryRequest(node=SIDECAR_NODE, type_url=SIDECAR, resource_names_subscribe=["*"])
    )
    assert [r.name for r in data.resources] == ["sidecar/a", "sidecar/b"]
    sidecar.on_request(discovery_pb2.DeltaDiscoveryRequest(type_url=SIDECAR, response_nonce=data.nonce))
    envoy = Envoy(cache)
    cache.set_snapshot(ALL_NODES, BEFORE)  # listener b goes
    assert sidecar.on_push() == []  # Envoy still holds route/b, which names sidecar/b
    envoy.run()
    (removal,) = sidecar.on_push()
    assert list(removal.removed_resources) == ["sidecar/b"]


def test_after_a_refused_cluster_update_the_later_steps_still_go(cache: SnapshotCache) -> None:
    envoy = Envoy(cache)
    cache.set_snapshot(ALL_NODES, AFTER)
    (clusters,) = envoy.stream.on_push()
    (routes,) = envoy.ack(clusters, error="no such host")
    assert routes.type_url == ROUTE
    (final,) = envoy.ack(routes)
    assert final.type_url == CLUSTER  # the removal step, a different state, is offered once
    assert envoy.ack(final, error="no such host") == []
    assert envoy.stream.on_push() == []  # nothing refused is sent again


def test_a_reconnecting_envoy_gets_new_routes_only_once_a_reconnecting_sidecar_holds_their_data() -> None:
    # A control plane restarted on a config edited while it was down: Envoy reconnects first,
    # holding routes of the old version; the sidecar's own reconnect comes later. Routes sent
    # before it holds their data would be answered 503 config_version_unknown; held back, the
    # routes Envoy holds keep serving.
    cache = SnapshotCache()
    cache.set_snapshot(ALL_NODES, AFTER)
    woken: list[str] = []
    stream = SotwStream(StreamInfo(1, "sotw", "envoy"), cache, Hooks(), lambda: woken.append("envoy"))
    sent = []
    for t, names_ in ((CLUSTER, ()), (LISTENER, ()), (ROUTE, ("route/a",))):
        pending = stream.on_request(sotw_request(t, BEFORE.type_version(t), names=names_))
        while pending:
            (response,) = pending
            sent.append(response.type_url)
            pending = stream.on_request(
                sotw_request(
                    response.type_url,
                    response.version_info,
                    response.nonce,
                    names=("route/a",) if response.type_url == ROUTE else (),
                )
            )
    assert sent == []  # nothing moves before a sidecar holds the new data: Envoy keeps what it has
    woken.clear()
    Sidecar(cache, [])
    assert woken  # the sidecar's ACK wakes the Envoy stream
    pending = stream.on_push()
    while pending:
        (response,) = pending
        sent.append(response.type_url)
        pending = stream.on_request(
            sotw_request(
                response.type_url,
                response.version_info,
                response.nonce,
                names=("route/a",) if response.type_url == ROUTE else (),
            )
        )
    assert sent == [CLUSTER, ROUTE]  # then in make-before-break order


def test_a_reconnecting_envoy_waits_for_the_sidecars_only_for_a_while() -> None:
    cache = SnapshotCache()
    cache.set_snapshot(ALL_NODES, AFTER)
    woken: list[str] = []
    stream = SotwStream(StreamInfo(1, "sotw", "envoy"), cache, Hooks(), lambda: woken.append("envoy"), resync_wait=0.05)
    pending = stream.on_request(sotw_request(ROUTE, BEFORE.type_version(ROUTE), names=("route/a",)))
    assert pending == []
    wait_for(lambda: woken, timeout=5, what="the bounded wait to end")
    (routes,) = stream.on_push()
    assert routes.type_url == ROUTE


def test_an_envoy_that_holds_no_routes_yet_gets_them_without_waiting_for_sidecars() -> None:
    cache = SnapshotCache()
    cache.set_snapshot(ALL_NODES, AFTER)
    stream = SotwStream(StreamInfo(1, "sotw", "envoy"), cache, Hooks(), lambda: None)
    (routes,) = stream.on_request(sotw_request(ROUTE, names=("route/a",)))
    assert routes.type_url == ROUTE


def test_a_cluster_no_route_names_goes_only_a_while_after_the_routes_moved(cache: SnapshotCache) -> None:
    # A request matched by the old route just before it moved may still be with the sidecar,
    # which names the old cluster; Envoy then looks that cluster up. Removed at once, it is
    # gone: 503 "no cluster" (seen against a real Envoy in tests/e2e/test_push_order.py).
    woken: list[str] = []
    envoy = Envoy(cache, woken)
    envoy.stream._removal_grace = 0.2
    cache.set_snapshot(ALL_NODES, AFTER)
    assert [t for t, _ in envoy.run()] == [CLUSTER, ROUTE]  # the old cluster is kept for now
    woken.clear()
    wait_for(lambda: woken, timeout=5, what="the grace to end")
    (removal,) = envoy.stream.on_push()
    assert removal.type_url == CLUSTER and "provider/old" not in names(removal)
