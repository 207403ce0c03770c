"""Pool discovery end to end: EndpointSlices -> the control plane -> a real Envoy, by EDS only.

No Kubernetes API server can run here (no cluster, no etcd, no kube-apiserver binary), so the
control plane's real ``kubernetes`` client talks to ``apiserver.FakeApiServer``, which serves
hand-written ``discovery.k8s.io/v1`` EndpointSlice lists and watch streams as the API server
does. Everything else is the product: the control plane with Kubernetes discovery, the
``vllm-sr extproc serve`` sidecar, and Envoy 1.40 configured only over ADS.

Members are pods at distinct loopback addresses on one port, as pods of one Deployment are;
one real runtime (``vllm-srun serve default``, bound to every address) answers for all of
them, and Envoy's own per-host counters tell which pod Envoy sent each request to. The
Service is named ``localhost`` (a valid Service name) and given without a namespace, so its
DNS URL, which the sidecar calls itself for model cards, resolves here as a Service name
resolves to its ClusterIP in a cluster. A client
sends requests without pause through every change; while a member is ready, none may fail.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sr_control.compiler import Address, Settings
from sr_control.pools import KubernetesDiscovery
from sr_control.pools.kubernetes import api_client
from sr_control.xds import ControlPlane
from tests.e2e.envoy_proc import free_port, wait_for
from tests.e2e.http_client import request
from tests.extproc.harness import VLLM_SRUN, SidecarProc, envoy_for, get_status, get_text, metric
from tests.pools.apiserver import FakeApiServer, endpoint_slice

pytestmark = [pytest.mark.envoy, pytest.mark.slow]
NS = "ml"
SERVICE = "localhost"
# A choice question: `default` reads it in milliseconds (its noul reader takes ~0.1 s a question),
# so the traffic is dense enough to see every endpoint change land.
BODY = json.dumps(
    {
        "model": "default",
        "state": "The export button fails with a 500.",
        "questions": {
            "team": {
                "type": "choice",
                "instructions": "Which team?",
                "criteria": {"billing": None, "engineering": None},
            }
        },
    }
).encode()


class Client:
    """Sends requests one after another until stopped, counting statuses."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.statuses: Counter[int] = Counter()
        self.failures: list[tuple[int, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            reply = request(self.port, "POST", "/v1/systemone", BODY, {"content-type": "application/json"}, timeout=10)
            self.statuses[reply.status] += 1
            if reply.status != 200:
                self.failures.append((reply.status, reply.body[:300]))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


class Pods:
    """``vllm-srun serve default`` on every loopback address at one port: the pods' processes."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.proc = subprocess.Popen(
            [VLLM_SRUN, "serve", "default", "--device", "cpu", "--host", "0.0.0.0", "--port", str(self.port)],
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def wait(self) -> Pods:
        def ready() -> bool:
            assert self.proc.poll() is None, f"runtime exited: {self.log.read_text()[-2000:]}"
            return get_status(f"http://127.0.0.1:{self.port}/health", timeout=1) == 200

        wait_for(ready, timeout=120, interval=0.1, what="the runtime")
        return self

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("discovery")
    ips = ["127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"]
    pods = Pods(directory / "runtime.log")
    started: list[Any] = [pods]
    try:
        api = FakeApiServer()
        started.append(api)
        api.put(NS, endpoint_slice("rt-abc", "localhost", [(ips[0], True)], port=pods.port))
        listener, sidecar_port = free_port(), free_port()
        config = directory / "config.yaml"
        config.write_text(f"""version: 2
deployments:
  rt:
    provider: systemone
    service: {{name: localhost, port: {pods.port}}}
    model: default
    schema: vllm-sr/5.0
listeners:
  - name: public
    address: 127.0.0.1
    port: {listener}
    apis:
      systemone: {{models: [default], max_deadline_ms: 10000}}
""")
        client, _ = api_client(api.kubeconfig(directory, NS))
        plane = ControlPlane(
            config,
            Settings(sidecar=Address("127.0.0.1", sidecar_port)),
            host="127.0.0.1",
            port=0,
            status_port=0,
            discovery=KubernetesDiscovery(client, NS),
        )
        plane.start()
        started.append(plane)
        # The pods are ready before the sidecar reads their card and Envoy health-checks them,
        # as readiness gates a pod's entry in its EndpointSlice.
        pods.wait()
        sidecar = SidecarProc(directory, plane.port, port=sidecar_port).wait()
        started.append(sidecar)
        envoy = envoy_for(directory, plane, sidecar_port)  # type: ignore[arg-type]
        started.append(envoy)
        wait_for(
            lambda: (
                request(listener, "POST", "/v1/systemone", BODY, {"content-type": "application/json"}).status == 200
            ),
            what="a first answer",
        )
        yield {"api": api, "ips": ips, "port": pods.port, "plane": plane, "envoy": envoy, "listener": listener}
    finally:
        for part in reversed(started):
            part.stop()


def host_requests(world: dict[str, Any]) -> dict[str, int]:
    """Envoy's count of requests sent to each host of the deployment's cluster, by address."""
    clusters = json.loads(world["envoy"].admin("/clusters?format=json"))
    out = {}
    for status in clusters["cluster_statuses"]:
        if status["name"] == "deployment/rt":
            for host in status.get("host_statuses", []):
                stats = {s["name"]: int(s.get("value", 0)) for s in host.get("stats", [])}
                out[host["address"]["socket_address"]["address"]] = stats.get("rq_total", 0)
    return out


def envoy_hosts(world: dict[str, Any]) -> set[str]:
    clusters = json.loads(world["envoy"].admin("/clusters?format=json"))
    for status in clusters["cluster_statuses"]:
        if status["name"] == "deployment/rt":
            return {h["address"]["socket_address"]["address"] for h in status.get("host_statuses", [])}
    return set()


def pushes(world: dict[str, Any], kind: str) -> float:
    return metric(world["plane"].metrics.text().decode(), "vsr_xds_pushes_total", type=kind, result="ack")


def test_envoy_follows_every_endpointslice_change_without_a_failed_request(world: dict[str, Any]) -> None:
    api, plane = world["api"], world["plane"]
    a, b, c, d = world["ips"]
    port = world["port"]
    wait_for(lambda: envoy_hosts(world) == {a}, what="Envoy to hold the first member")
    version = plane.reloader.snapshot.version
    before = {kind: pushes(world, kind) for kind in ("clusters", "listeners", "routes", "sidecar")}
    client = Client(world["listener"])
    try:
        wait_for(lambda: host_requests(world).get(a, 0) > 0, what="requests to the first member")

        # A member appears: a new ready pod in the slice.
        api.put(NS, endpoint_slice("rt-abc", SERVICE, [(a, True), (b, True)], port=port))
        wait_for(lambda: host_requests(world).get(b, 0) > 0, what="requests to the new member")

        # A member turns unready (say its readiness probe fails): Envoy stops sending to it,
        # although it still answers and passes Envoy's own health check.
        api.put(NS, endpoint_slice("rt-abc", SERVICE, [(a, False), (b, True)], port=port))
        wait_for(lambda: envoy_hosts(world) == {b}, what="Envoy to drop the unready member")
        start = host_requests(world)[b]
        wait_for(lambda: host_requests(world)[b] > start + 20, what="traffic to the ready member")
        assert a not in host_requests(world), "Envoy still holds the unready member"

        # A member changes: its pod is replaced by one at another address.
        api.put(NS, endpoint_slice("rt-abc", SERVICE, [(a, False), (c, True)], port=port))
        wait_for(lambda: envoy_hosts(world) == {c}, what="Envoy to follow the replaced member")
        wait_for(lambda: host_requests(world).get(c, 0) > 0, what="requests to the replacement")

        # Members leave: a second slice brings a member, then the first slice is deleted.
        api.put(NS, endpoint_slice("rt-xyz", SERVICE, [(d, None)], port=port))  # ready unset reads as ready
        wait_for(lambda: envoy_hosts(world) == {c, d}, what="Envoy to add the second slice's member")
        wait_for(lambda: host_requests(world).get(d, 0) > 0, what="requests to the second slice's member")
        api.delete(NS, "rt-abc")
        wait_for(lambda: envoy_hosts(world) == {d}, what="Envoy to drop the deleted slice's members")
        start = host_requests(world)[d]
        wait_for(lambda: host_requests(world)[d] > start + 20, what="traffic to the remaining member")
    finally:
        client.stop()
    assert client.failures == [], f"requests failed while a member was ready: {client.failures[:3]}"
    assert client.statuses[200] > 60
    # Pod churn is endpoints only: one config version, no cluster, listener, route or sidecar push.
    assert plane.reloader.snapshot.version == version
    assert {kind: pushes(world, kind) for kind in before} == before
    assert pushes(world, "endpoints") >= 5


def test_status_shows_what_discovery_sees(world: dict[str, Any]) -> None:
    status = json.loads(get_text(f"http://127.0.0.1:{world['plane'].status_port}/status"))
    discovery = status["discovery"]
    assert discovery["mode"] == "kubernetes"
    assert discovery["services"][f"{NS}/{SERVICE}"]["listed"] is True
    assert discovery["services"][f"{NS}/{SERVICE}"]["error"] is None
    assert discovery["deployments"]["rt"]["service"] == f"{NS}/{SERVICE}"
    hosts = discovery["deployments"]["rt"]["hosts"]
    assert hosts == sorted(hosts) and all(h.endswith(f":{world['port']}") for h in hosts)
    text = world["plane"].metrics.text().decode()
    assert metric(text, "vsr_discovery_endpoints", deployment="rt") == len(hosts)
