"""Endpoints (EDS) on an ADS stream: outside the step order, never behind a step's ACK.

Envoy holds back its ACK of a cluster update while a new EDS cluster warms, and the cluster
warms only once its endpoints arrive; so endpoints must go out while the cluster step awaits its
ACK. Pod churn changes endpoints only: nothing else is sent.
"""

from __future__ import annotations

from typing import Any

from envoy.service.discovery.v3 import discovery_pb2

from sr_control.compiler import Resources, compile
from sr_control.compiler.eds import endpoint_resource
from sr_control.compiler.protos import CLUSTER, ENDPOINT, LISTENER, ROUTE, Cluster, ClusterLoadAssignment
from sr_control.config.load import load_text
from sr_control.xds.cache import ALL_NODES, SnapshotCache
from sr_control.xds.delta import DeltaStream
from sr_control.xds.hooks import Hooks, StreamInfo
from sr_control.xds.snapshot import Snapshot
from sr_control.xds.sotw import SotwStream
from tests.xds.xds_support import NODE, sotw_request

STATIC = 'static: {provider: systemone, endpoint: "http://127.0.0.1:9/v1/systemone", model: d3}'
SERVICE = "pods: {provider: systemone, service: {name: rt, namespace: ml, port: 8100}, model: d3, schema: vllm-sr/5.0}"


def config(*deployments: str) -> Resources:
    rows = "\n".join(f"  {d}" for d in deployments)
    return compile(
        load_text(f"""version: 2
deployments:
{rows}
listeners:
  - {{name: a, address: 127.0.0.1, port: 8801, apis: {{systemone: {{models: [d3]}}}}}}
""")
    )


def endpoints(*ips: str) -> Resources:
    return Resources({ENDPOINT: [endpoint_resource("deployment/pods", [(ip, 8100) for ip in ips], "rt.ml.svc")]})


def hosts(response: Any) -> list[str]:
    resources = (
        [r.resource for r in response.resources]
        if response.DESCRIPTOR is discovery_pb2.DeltaDiscoveryResponse.DESCRIPTOR
        else list(response.resources)
    )
    out = []
    for packed in resources:
        cla = ClusterLoadAssignment()
        packed.Unpack(cla)
        out += [e.endpoint.address.socket_address.address for group in cla.endpoints for e in group.lb_endpoints]
    return sorted(out)


def test_a_new_eds_clusters_endpoints_go_out_while_the_cluster_step_awaits_its_ack() -> None:
    cache = SnapshotCache()
    cache.set_snapshot(ALL_NODES, Snapshot.of(config(STATIC), 1))
    stream = SotwStream(StreamInfo(1, "sotw", "envoy"), cache, Hooks(), lambda: None)
    for t, names in ((CLUSTER, ()), (LISTENER, ()), (ROUTE, ("route/a",))):
        (response,) = stream.on_request(sotw_request(t, names=names))
        assert stream.on_request(sotw_request(t, response.version_info, response.nonce, names=names)) == []

    cache.set_snapshot(ALL_NODES, Snapshot.of(config(STATIC, SERVICE), 2, endpoints("10.0.0.1", "10.0.0.2")))
    (clusters,) = stream.on_push()
    assert clusters.type_url == CLUSTER
    eds = Cluster()
    [eds.ParseFromString(r.value) for r in clusters.resources if Cluster.FromString(r.value).name == "deployment/pods"]
    assert Cluster.DiscoveryType.Name(eds.type) == "EDS"
    # Envoy asks for the new cluster's endpoints before it ACKs the clusters; they come at once.
    (assignment,) = stream.on_request(sotw_request(ENDPOINT, names=("deployment/pods",)))
    assert assignment.type_url == ENDPOINT
    assert hosts(assignment) == ["10.0.0.1", "10.0.0.2"]
    assert (
        stream.on_request(sotw_request(ENDPOINT, assignment.version_info, assignment.nonce, names=("deployment/pods",)))
        == []
    )
    # The cluster ACK then lets the ordered steps go on.
    (next_step,) = stream.on_request(sotw_request(CLUSTER, clusters.version_info, clusters.nonce))
    assert next_step.type_url in (LISTENER, ROUTE)


def test_pod_churn_sends_endpoints_only_under_the_same_config_version() -> None:
    resources = config(STATIC, SERVICE)
    first = Snapshot.of(resources, 1, endpoints("10.0.0.1"))
    cache = SnapshotCache()
    cache.set_snapshot(ALL_NODES, first)
    sotw = SotwStream(StreamInfo(1, "sotw", "envoy"), cache, Hooks(), lambda: None)
    delta = DeltaStream(StreamInfo(2, "delta", "envoy"), cache, Hooks(), lambda: None)

    def delta_request(t: str, nonce: str = "", subscribe: tuple[str, ...] = ()) -> list[Any]:
        return delta.on_request(
            discovery_pb2.DeltaDiscoveryRequest(
                node=NODE, type_url=t, response_nonce=nonce, resource_names_subscribe=list(subscribe)
            )
        )

    for t, names in ((CLUSTER, ()), (ENDPOINT, ("deployment/pods",)), (LISTENER, ()), (ROUTE, ("route/a",))):
        for response in sotw.on_request(sotw_request(t, names=names)):
            assert sotw.on_request(sotw_request(t, response.version_info, response.nonce, names=names)) == []
        for response in delta_request(t, subscribe=names):
            assert delta_request(t, response.nonce) == []

    second = first.with_endpoints(endpoints("10.0.0.2", "10.0.0.3"))
    assert (second.version, second.generation) == (first.version, first.generation)
    cache.set_snapshot(ALL_NODES, second)
    (s,) = sotw.on_push()
    (d,) = delta.on_push()
    assert (s.type_url, d.type_url) == (ENDPOINT, ENDPOINT)
    assert hosts(s) == hosts(d) == ["10.0.0.2", "10.0.0.3"]
    assert sotw.on_request(sotw_request(ENDPOINT, s.version_info, s.nonce, names=("deployment/pods",))) == []
    assert delta_request(ENDPOINT, d.nonce) == []


def test_a_removed_deployment_keeps_its_endpoints_until_its_cluster_goes() -> None:
    cache = SnapshotCache()
    cache.set_snapshot(ALL_NODES, Snapshot.of(config(STATIC, SERVICE), 1, endpoints("10.0.0.1")))
    stream = DeltaStream(StreamInfo(1, "delta", "envoy"), cache, Hooks(), lambda: None)

    def request(
        t: str, nonce: str = "", subscribe: tuple[str, ...] = (), unsubscribe: tuple[str, ...] = ()
    ) -> list[Any]:
        return stream.on_request(
            discovery_pb2.DeltaDiscoveryRequest(
                node=NODE,
                type_url=t,
                response_nonce=nonce,
                resource_names_subscribe=list(subscribe),
                resource_names_unsubscribe=list(unsubscribe),
            )
        )

    for t, names in ((CLUSTER, ()), (ENDPOINT, ("deployment/pods",)), (LISTENER, ()), (ROUTE, ("route/a",))):
        for response in request(t, subscribe=names):
            assert request(t, response.nonce) == []

    cache.set_snapshot(ALL_NODES, Snapshot.of(config(STATIC), 2))
    seen = []
    pending = stream.on_push()
    while pending:
        response = pending.pop(0)
        seen.append((response.type_url, [r.name for r in response.resources], list(response.removed_resources)))
        pending += request(response.type_url, response.nonce)
    # The endpoints go only after the cluster: requests routed to it meanwhile still find a host.
    cluster_gone = seen.index((CLUSTER, [], ["deployment/pods"]))
    assert [i for i, (t, _, _) in enumerate(seen) if t == ENDPOINT] == [cluster_gone + 1]
    assert seen[cluster_gone + 1] == (ENDPOINT, [], ["deployment/pods"])
