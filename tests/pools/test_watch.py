"""The EndpointSlice watch with the real ``kubernetes`` client against ``apiserver.FakeApiServer``
(no API server can run here: see that module), through what a real API server does to a
watcher: changes, expired versions, a restart, an RBAC refusal, an outage."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr_control.config.model import ServiceRef
from sr_control.pools import KubernetesDiscovery, ServiceKey, discovery_from
from sr_control.pools.kubernetes import SliceWatch, api_client
from tests.e2e.envoy_proc import wait_for
from tests.pools.apiserver import FakeApiServer, endpoint_slice

NS = "ml"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    yield server
    server.stop()


@pytest.fixture
def watch(api: FakeApiServer, tmp_path: Path) -> Iterator[tuple[SliceWatch, threading.Event]]:
    api.put(NS, endpoint_slice("rt-1", "rt", [("10.0.0.1", True)]))
    api.put(NS, endpoint_slice("other-1", "other", [("10.9.9.9", True)]))  # another Service's slice
    client, _ = api_client(api.kubeconfig(tmp_path, NS))
    changed = threading.Event()
    w = SliceWatch(client, NS, "rt", changed.set).start()
    assert w.synced.wait(10)
    yield w, changed
    w.stop()


def ips(w: SliceWatch) -> list[str]:
    return sorted(e["addresses"][0] for s in w.slices() for e in s["endpoints"])


def test_a_list_then_every_change_in_order(api: FakeApiServer, watch: tuple[SliceWatch, threading.Event]) -> None:
    w, changed = watch
    assert ips(w) == ["10.0.0.1"]  # only this Service's slices
    changed.clear()
    api.put(NS, endpoint_slice("rt-2", "rt", [("10.0.0.2", True)]))
    wait_for(lambda: ips(w) == ["10.0.0.1", "10.0.0.2"], what="the added slice")
    assert changed.is_set()
    api.put(NS, endpoint_slice("rt-1", "rt", [("10.0.0.3", True)]))
    api.delete(NS, "rt-2")
    wait_for(lambda: ips(w) == ["10.0.0.3"], what="the modified and deleted slices")
    assert api.lists() == 1  # one list, then the watch alone


def test_an_expired_watch_lists_again(api: FakeApiServer, watch: tuple[SliceWatch, threading.Event]) -> None:
    w, _ = watch
    api.expire()
    wait_for(lambda: api.lists() == 2, what="a second list")
    api.put(NS, endpoint_slice("rt-2", "rt", [("10.0.0.2", True)]))
    wait_for(lambda: ips(w) == ["10.0.0.1", "10.0.0.2"], what="changes after the new list")
    assert w.error is None


def test_a_watch_the_server_ends_resumes_from_the_last_version_seen(
    api: FakeApiServer, watch: tuple[SliceWatch, threading.Event]
) -> None:
    w, _ = watch
    wait_for(lambda: api.watches() == 1, what="the watch to open")
    api.put(NS, endpoint_slice("rt-2", "rt", [("10.0.0.2", True)]))
    wait_for(lambda: len(ips(w)) == 2, what="the change")
    seen = w.resource_version
    api.end_watches()
    wait_for(lambda: api.watches() == 2, what="a new watch")
    assert api.requests[-1] == f"watch {NS} from {seen}"
    assert api.lists() == 1


def test_a_refusal_is_shown_and_the_slices_last_seen_stay(
    api: FakeApiServer, watch: tuple[SliceWatch, threading.Event]
) -> None:
    w, _ = watch
    wait_for(lambda: api.watches() == 1, what="the watch to open")  # else there is nothing to end yet
    api.forbidden.add(NS)
    api.end_watches()
    wait_for(lambda: w.error is not None, what="the refusal")
    assert "forbidden (403)" in w.error and "list and watch endpointslices in namespace 'ml'" in w.error
    assert ips(w) == ["10.0.0.1"]  # an RBAC mistake or an outage never empties a pool
    api.forbidden.clear()
    api.put(NS, endpoint_slice("rt-1", "rt", [("10.0.0.4", True)]))
    wait_for(lambda: ips(w) == ["10.0.0.4"] and w.error is None, timeout=15, what="recovery after the refusal ends")


def test_stop_ends_a_watch_blocked_on_the_stream(watch: tuple[SliceWatch, threading.Event]) -> None:
    w, _ = watch
    w.stop()
    assert not w._thread.is_alive()


def test_discovery_watches_what_the_config_names_and_reads_hosts(api: FakeApiServer, tmp_path: Path) -> None:
    api.put(NS, endpoint_slice("rt-1", "rt", [("10.0.0.1", True), ("10.0.0.2", False)], port=8100))
    discovery = discovery_from(api.kubeconfig(tmp_path, NS), None, in_cluster=False)
    assert isinstance(discovery, KubernetesDiscovery) and discovery.namespace == NS  # the kubeconfig context's
    changes = threading.Event()
    discovery.subscribe(changes.set)
    try:
        discovery.watch({ServiceKey(NS, "rt")})
        discovery.wait_synced({ServiceKey(NS, "rt")}, 10)
        found = discovery.hosts(ServiceRef(name="rt", port=80))
        assert found is not None and found.hosts == (("10.0.0.1", 8100),)
        assert discovery.hosts(ServiceRef(name="rt", namespace="elsewhere", port=80)) is None  # not watched
        discovery.watch(set())
        assert discovery.status()["services"] == {}
    finally:
        discovery.stop()


def test_outside_kubernetes_there_is_no_discovery_and_it_says_why() -> None:
    discovery = discovery_from(None, None, in_cluster=False)
    discovery.watch({ServiceKey("default", "rt")})
    assert discovery.hosts(ServiceRef(name="rt", port=80)) is None
    status = discovery.status()
    assert status["mode"] == "off" and "no --kubeconfig" in status["reason"]
