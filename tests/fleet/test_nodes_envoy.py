"""The simulated nodes are held to the real ones: against the same control plane, for a first load
and one edit, the simulated Envoy sends the same requests as a real Envoy (types, names,
versions, nonces, in order) and the control plane sees the same ACKs; the simulated sidecar
does the same as the sidecar's own subscription.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from envoy.config.core.v3 import base_pb2

from sr_control.compiler import Address, Resources, Settings, bootstrap, compile, names
from sr_control.compiler.eds import endpoint_resource
from sr_control.compiler.output import to_yaml
from sr_control.compiler.protos import CLUSTER, ENDPOINT, LISTENER, ROUTE, TYPE_NAMES, to_dict
from sr_control.config.load import load_text
from sr_control.extproc.subscription import Subscription
from sr_control.extproc.versions import VersionStore
from sr_control.xds.cache import ALL_NODES, SnapshotCache
from sr_control.xds.hooks import Hooks, StreamInfo
from sr_control.xds.server import AdsService, make_server
from sr_control.xds.snapshot import Snapshot
from tests.e2e.envoy_proc import Envoy, free_port, wait_for
from tests.fleet.nodes import Fleet
from tests.xds.xds_support import config_text


class Seen:
    """What the control plane sees of each node: its requests and its ACKs, in order."""

    def __init__(self) -> None:
        self.events: dict[str, list[tuple[Any, ...]]] = {}
        self.versions: dict[str, str] = {"": ""}  # version -> a name that reads the same for every node

    def hooks(self) -> Hooks:
        return Hooks(received=self._received, acked=self._acked)

    def _label(self, version: str) -> str:
        return self.versions.setdefault(version, f"v{len(self.versions)}")

    def _received(self, info: StreamInfo, req: Any) -> None:
        t = TYPE_NAMES.get(req.type_url, req.type_url)
        if info.protocol == "delta":
            names = (tuple(sorted(req.resource_names_subscribe)), tuple(sorted(req.resource_names_unsubscribe)))
            held = tuple(sorted((n, self._label(v)) for n, v in req.initial_resource_versions.items()))
            entry = ("request", t, names, held, req.response_nonce)
        else:
            names = tuple(sorted(req.resource_names))
            entry = ("request", t, names, self._label(req.version_info), req.response_nonce)
        self.events.setdefault(info.node.id, []).append(entry + (req.error_detail.message,))

    def _acked(self, info: StreamInfo, type_url: str, version: str) -> None:
        self.events.setdefault(info.node.id, []).append(("ack", TYPE_NAMES[type_url], self._label(version)))


def snapshot(
    listeners: dict[str, int], settings: Settings, generation: int, apis: str = "{chat_completions: {}}"
) -> Snapshot:
    return Snapshot.of(compile(load_text(config_text(listeners, apis)), settings), generation)


def eds_snapshot(listeners: dict[str, int], settings: Settings, generation: int, pod_port: int) -> Snapshot:
    """Listeners answering the System One API from a Service-backed deployment (an EDS cluster),
    whose one pod is ``pod_port`` on loopback."""
    rows = "\n".join(
        f"  - {{name: {name}, address: 127.0.0.1, port: {port}, apis: {{systemone: {{models: [d3]}}}}}}"
        for name, port in listeners.items()
    )
    text = f"""version: 2
deployments:
  pods: {{provider: systemone, service: {{name: rt, namespace: ml, port: 8100}}, model: d3, schema: vllm-sr/5.0}}
listeners:
{rows}
"""
    pods = endpoint_resource(names.deployment_cluster("pods"), [("127.0.0.1", pod_port)], "rt.ml.svc")
    return Snapshot.of(compile(load_text(text), settings), generation, Resources({ENDPOINT: [pods]}))


@pytest.fixture
def plane() -> Iterator[tuple[SnapshotCache, Seen, int]]:
    cache, seen = SnapshotCache(), Seen()
    server, port = make_server(AdsService(cache, seen.hooks()), "127.0.0.1:0")
    server.start()
    yield cache, seen, port
    server.stop(grace=None)


@pytest.mark.envoy
@pytest.mark.slow
@pytest.mark.parametrize("clusters", ["static", "eds"])
def test_the_simulated_envoy_asks_and_acks_as_a_real_envoy_does(
    plane: tuple[SnapshotCache, Seen, int], tmp_path: Path, clusters: str
) -> None:
    """``eds``: a Service-backed deployment, whose cluster's endpoints Envoy asks for over EDS."""
    cache, seen, port = plane
    admin = free_port()
    settings = Settings(xds=Address("127.0.0.1", port), admin=Address("127.0.0.1", admin), ads="sotw")
    ports = {"a": free_port(), "b": free_port()}
    if clusters == "eds":
        pod = free_port()  # nothing listens: its health check fails at once
        first, edited = eds_snapshot({"a": ports["a"]}, settings, 1, pod), eds_snapshot(ports, settings, 2, pod)
    else:
        first, edited = snapshot({"a": ports["a"]}, settings, 1), snapshot(ports, settings, 2)
    cache.set_snapshot(ALL_NODES, first)

    def in_step(node: str, snap: Snapshot) -> bool:
        acked = {e[1]: e[2] for e in list(seen.events.get(node, [])) if e[0] == "ack"}
        return all(
            acked.get(TYPE_NAMES[t]) == seen.versions.get(snap.type_version(t)) for t in (CLUSTER, LISTENER, ROUTE)
        )

    boot = tmp_path / "bootstrap.yaml"
    boot.write_text(to_yaml(to_dict(bootstrap(settings))))
    envoy = Envoy(boot, admin, tmp_path / "envoy.log")
    try:
        wait_for(lambda: in_step(settings.node_id, first), timeout=20, what="Envoy to take the first load")

        async def simulate() -> None:
            async with Fleet(f"127.0.0.1:{port}", envoys=1, prefix="sim") as fleet:
                await fleet.in_step(first, timeout=10)
                cache.set_snapshot(ALL_NODES, edited)
                await fleet.in_step(edited, timeout=10)
                # Both have taken the edit once the control plane has both ACKs.
                while not (in_step(settings.node_id, edited) and in_step("sim-envoy-0", edited)):
                    await asyncio.sleep(0.005)

        asyncio.run(asyncio.wait_for(simulate(), 30))
    finally:
        envoy.stop()
    real, simulated = seen.events[settings.node_id], seen.events["sim-envoy-0"]
    assert simulated == real
    # Envoy asks for an EDS cluster's endpoints before it ACKs the clusters, and for listeners once
    # those endpoints are in.
    endpoints = ["endpoints"] if clusters == "eds" else []
    assert [e[1] for e in real if e[0] == "ack"] == [
        "clusters",
        *endpoints,
        "listeners",
        "routes",
        "listeners",
        "routes",
    ]


def test_the_simulated_sidecar_asks_and_acks_as_the_sidecar_does(plane: tuple[SnapshotCache, Seen, int]) -> None:
    cache, seen, port = plane
    settings = Settings()
    first = snapshot({"a": 8801, "b": 8802}, settings, 1)
    edited = snapshot({"a": 8801, "b": 8802}, settings, 2, apis="{chat_completions: {}, responses: {}}")
    cache.set_snapshot(ALL_NODES, first)

    def acks(node: str) -> int:
        return sum(e[0] == "ack" for e in list(seen.events.get(node, [])))

    async def run() -> None:
        store = VersionStore()
        real = Subscription(f"127.0.0.1:{port}", store, base_pb2.Node(id="sidecar-0"), listeners=("a",))
        task = asyncio.ensure_future(real.run())
        async with Fleet(f"127.0.0.1:{port}", sidecars=1, listeners=["a"], prefix="sim") as fleet:
            await fleet.in_step(first, timeout=10)
            await asyncio.wait_for(real.first.wait(), 10)
            cache.set_snapshot(ALL_NODES, edited)
            await fleet.in_step(edited, timeout=10)
            # Both have taken the edit once the control plane has both ACKs.
            while min(acks("sidecar-0"), acks("sim-sidecar-0")) < 2:
                await asyncio.sleep(0.005)
        real.stop()
        await task

    asyncio.run(asyncio.wait_for(run(), 30))
    assert seen.events["sim-sidecar-0"] == seen.events["sidecar-0"]
    assert [e[0] for e in seen.events["sidecar-0"]] == ["request", "request", "ack", "request", "ack"]
