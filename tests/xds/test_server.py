"""The ADS service over real gRPC: a client plays Envoy on both protocols; the ledger reports it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from envoy.service.discovery.v3 import discovery_pb2

from sr_control.compiler.protos import CLUSTER, LISTENER, SIDECAR
from sr_control.xds.cache import ALL_NODES, SnapshotCache
from sr_control.xds.hooks import Hooks
from sr_control.xds.ledger import Ledger
from sr_control.xds.server import AdsService, make_server
from tests.xds.xds_support import NODE, AdsClient, snapshot, sotw_request, wait_for


@pytest.fixture
def plane() -> Iterator[tuple[SnapshotCache, Ledger, int]]:
    cache, ledger = SnapshotCache(), Ledger()
    cache.set_snapshot(ALL_NODES, snapshot({"a": 8801}))
    server, port = make_server(AdsService(cache, Hooks.chain(ledger.hooks())), "127.0.0.1:0")
    server.start()
    yield cache, ledger, port
    server.stop(grace=None)


def test_sotw_stream_serves_acks_and_pushes(plane: tuple[SnapshotCache, Ledger, int]) -> None:
    cache, ledger, port = plane
    client = AdsClient(port)
    try:
        client.send(sotw_request(CLUSTER))
        clusters = client.receive()
        client.send(sotw_request(CLUSTER, clusters.version_info, clusters.nonce))
        client.send(sotw_request(LISTENER))
        listeners = client.receive()
        assert [r.type_url for r in listeners.resources] == [LISTENER]
        client.send(sotw_request(LISTENER, listeners.version_info, listeners.nonce))
        node = wait_for(lambda: next((n for n in ledger.nodes() if n["types"].get("listeners", {}).get("acked")), None))
        assert node["id"] == NODE.id and node["protocol"] == "sotw"
        assert node["types"]["listeners"]["acked"] == listeners.version_info

        cache.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802}, 2))
        pushed = client.receive()
        assert pushed.type_url == LISTENER and len(pushed.resources) == 2
        client.send(sotw_request(LISTENER, listeners.version_info, pushed.nonce, error="cannot bind 127.0.0.1:8802"))
        nack = wait_for(lambda: ledger.nodes()[0]["types"]["listeners"]["nack"])
        assert nack["message"] == "cannot bind 127.0.0.1:8802"
        assert nack["version"] == pushed.version_info
    finally:
        client.close()
    wait_for(lambda: ledger.nodes() == [], what="the stream to close")


def test_delta_stream_serves_sidecar_data_by_name(plane: tuple[SnapshotCache, Ledger, int]) -> None:
    cache, ledger, port = plane
    client = AdsClient(port, delta=True)
    try:
        client.send(
            discovery_pb2.DeltaDiscoveryRequest(node=NODE, type_url=SIDECAR, resource_names_subscribe=["sidecar/a"])
        )
        response = client.receive()
        assert [r.name for r in response.resources] == ["sidecar/a"]
        assert response.resources[0].version == cache.snapshot(NODE).resources.named(SIDECAR)["sidecar/a"].version  # type: ignore[union-attr]
        client.send(discovery_pb2.DeltaDiscoveryRequest(type_url=SIDECAR, response_nonce=response.nonce))
        wait_for(lambda: ledger.nodes() and ledger.nodes()[0]["types"].get("sidecar", {}).get("acked"))
        # A change to another listener's data is not sent to a node that subscribed to "a" only.
        cache.set_snapshot(ALL_NODES, snapshot({"a": 8801, "b": 8802}, 2))
        assert client.nothing_within(0.2)
    finally:
        client.close()
