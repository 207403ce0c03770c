"""Reading EndpointSlices: which pods are a Service port's ready hosts."""

from __future__ import annotations

from sr_control.pools.slices import ready_hosts
from tests.pools.apiserver import endpoint_slice


def test_ready_and_unset_are_hosts_unready_and_terminating_are_not() -> None:
    s = endpoint_slice("rt-1", "rt", [("10.0.0.1", True), ("10.0.0.2", None), ("10.0.0.3", False)], port=8100)
    assert ready_hosts([s]).hosts == (("10.0.0.1", 8100), ("10.0.0.2", 8100))


def test_a_service_spread_over_slices_is_one_sorted_set_of_hosts() -> None:
    a = endpoint_slice("rt-1", "rt", [("10.0.0.9", True), ("10.0.0.1", True)], port=8100)
    b = endpoint_slice(
        "rt-2", "rt", [("10.0.0.1", True), ("10.0.0.5", True)], port=8100
    )  # a pod seen twice while it moves
    assert ready_hosts([a, b]).hosts == (("10.0.0.1", 8100), ("10.0.0.5", 8100), ("10.0.0.9", 8100))


def test_pods_of_one_service_may_have_different_target_ports() -> None:
    a = endpoint_slice("rt-1", "rt", [("10.0.0.1", True)], port=8100)
    b = endpoint_slice("rt-2", "rt", [("10.0.0.2", True)], port=9100)
    assert ready_hosts([a, b]).hosts == (("10.0.0.1", 8100), ("10.0.0.2", 9100))


def test_a_service_of_several_ports_needs_the_port_name() -> None:
    ports = [{"name": "http", "port": 8100, "protocol": "TCP"}, {"name": "metrics", "port": 9090, "protocol": "TCP"}]
    s = endpoint_slice("rt-1", "rt", [("10.0.0.1", True)], ports=ports)
    unnamed = ready_hosts([s])
    assert unnamed.hosts == ()
    assert (
        unnamed.problem
        == "slice rt-1: several ports ('http', 'metrics'); name one with the deployment's service.port_name"
    )
    assert ready_hosts([s], "http").hosts == (("10.0.0.1", 8100),)
    missing = ready_hosts([s], "grpc")
    assert missing.hosts == () and "no TCP port named 'grpc' (ports: 'http', 'metrics')" in (missing.problem or "")


def test_udp_ports_and_fqdn_slices_are_not_hosts() -> None:
    ports = [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "http", "port": 8100, "protocol": "TCP"}]
    assert ready_hosts([endpoint_slice("rt-1", "rt", [("10.0.0.1", True)], ports=ports)]).hosts == (("10.0.0.1", 8100),)
    fqdn = ready_hosts([endpoint_slice("rt-2", "rt", [("pod.example.com", True)], address_type="FQDN")])
    assert fqdn.hosts == () and "addressType 'FQDN'" in (fqdn.problem or "")


def test_an_empty_slice_without_ports_is_no_problem() -> None:
    # The controller writes such a slice for a Service whose pods are all gone.
    assert ready_hosts([endpoint_slice("rt-1", "rt", [], ports=[])]) == ready_hosts([])
