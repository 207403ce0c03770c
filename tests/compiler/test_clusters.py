"""Upstream clusters: one per deployment and provider model, sized and protected from the config."""

from __future__ import annotations

import pytest

from sr_control.compiler import Address, CompileError, Settings
from sr_control.compiler.limits import DEADLINE_MARGIN_MS, DEFAULT_DEADLINE_MS
from tests.compiler.compiled import cluster, compile_text, listener, sidecar_data

CONFIG = """
version: 2
providers:
  models:
    - {name: pair, api_format: chat_completions, endpoints: ["http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1"]}
deployments:
  local:
    provider: systemone
    endpoint: "http://127.0.0.1:8100/v1/systemone"
    model: d3
    schema: vllm-sr/5.0
    max_concurrency: 6
  gateway: {provider: systemone, endpoint: "https://gateway.example.com/v1/systemone", model: d3, max_concurrency: 16}
listeners:
  - {name: public, port: 8801, apis: {systemone: {max_deadline_ms: 4000}}}
"""


@pytest.fixture(scope="module")
def resources():  # type: ignore[no-untyped-def]
    return compile_text(CONFIG, Settings(sidecar=Address("10.9.9.9", 7000)))


def test_circuit_breakers_follow_max_concurrency(resources) -> None:  # type: ignore[no-untyped-def]
    limits = cluster(resources, "deployment/local")["circuit_breakers"]["thresholds"][0]
    assert limits["max_requests"] == 6
    assert limits["max_connections"] == 6
    assert limits["max_pending_requests"] == 24
    assert cluster(resources, "deployment/gateway")["circuit_breakers"]["thresholds"][0]["max_requests"] == 16


def test_a_vllm_sr_runtime_is_health_checked_on_its_health_path(resources) -> None:  # type: ignore[no-untyped-def]
    (check,) = cluster(resources, "deployment/local")["health_checks"]
    assert check["http_health_check"]["path"] == "/health"
    (standard,) = cluster(resources, "deployment/gateway")["health_checks"]
    assert "tcp_health_check" in standard  # the standard names no health path


def test_every_upstream_has_outlier_detection(resources) -> None:  # type: ignore[no-untyped-def]
    for name in ("deployment/local", "deployment/gateway", "provider/pair"):
        assert cluster(resources, name)["outlier_detection"]["consecutive_5xx"] == 5


def test_an_https_endpoint_gets_tls_with_sni_from_the_host(resources) -> None:  # type: ignore[no-untyped-def]
    gateway = cluster(resources, "deployment/gateway")
    assert gateway["type"] == "STRICT_DNS"
    assert gateway["transport_socket"]["name"] == "envoy.transport_sockets.tls"
    options = gateway["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert options["upstream_http_protocol_options"] == {"auto_sni": True, "auto_san_validation": True}
    endpoint = gateway["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert endpoint["address"]["socket_address"] == {"address": "gateway.example.com", "port_value": 443}


def test_a_model_with_several_endpoints_is_one_cluster_of_several_hosts(resources) -> None:  # type: ignore[no-untyped-def]
    pair = cluster(resources, "provider/pair")
    assert pair["type"] == "STATIC"
    hosts = [
        e["endpoint"]["address"]["socket_address"]["address"]
        for e in pair["load_assignment"]["endpoints"][0]["lb_endpoints"]
    ]
    assert hosts == ["10.0.0.1", "10.0.0.2"]


def test_32_mib_bodies_fit_every_buffer(resources) -> None:  # type: ignore[no-untyped-def]
    from tests.compiler.compiled import route_config

    need = 32 * 1024 * 1024
    assert cluster(resources, "deployment/local")["per_connection_buffer_limit_bytes"] > need
    assert listener(resources, "public")["per_connection_buffer_limit_bytes"] > need
    assert int(route_config(resources, "public")["virtual_hosts"][0]["request_body_buffer_limit"]) > need


def test_the_sidecar_is_an_http2_cluster_at_its_setting(resources) -> None:  # type: ignore[no-untyped-def]
    sidecar = cluster(resources, "vsr/sidecar")
    options = sidecar["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in options["explicit_http_config"]
    address = sidecar["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert address["socket_address"] == {"address": "10.9.9.9", "port_value": 7000}


def test_a_sidecar_on_a_unix_socket() -> None:
    resources = compile_text(CONFIG, Settings(sidecar=Address.parse("unix:/run/vsr/extproc.sock")))
    address = cluster(resources, "vsr/sidecar")["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"][
        "address"
    ]
    assert address == {"pipe": {"path": "/run/vsr/extproc.sock"}}


def _ext_proc(resources, name: str = "public"):  # type: ignore[no-untyped-def]
    hcm = listener(resources, name)["filter_chains"][0]["filters"][0]["typed_config"]
    return next(f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.ext_proc")


def test_the_ext_proc_message_timeout_ends_after_the_deadline(resources) -> None:  # type: ignore[no-untyped-def]
    """The sidecar answers 504 in the listener's form at the 4 s deadline; Envoy's message timeout
    (an empty 504) comes only the margin after it."""
    ext_proc = _ext_proc(resources)
    assert DEADLINE_MARGIN_MS == 2_000
    assert ext_proc["typed_config"]["message_timeout"] == "6s"
    assert ext_proc["disabled"] is True  # on only where a route enables it


def test_a_listener_without_max_deadline_ms_has_the_default_deadline() -> None:
    resources = compile_text(CONFIG.replace("{max_deadline_ms: 4000}", "{}"))
    assert DEFAULT_DEADLINE_MS == 60_000
    assert _ext_proc(resources)["typed_config"]["message_timeout"] == "62s"
    assert sidecar_data(resources, "public")["apis"][0]["max_deadline_ms"] == 60_000


def test_endpoints_one_cluster_cannot_hold_are_reported_with_their_field() -> None:
    config = """
version: 2
providers:
  models:
    - {name: mixed, api_format: chat_completions, endpoints: ["http://a:1/v1", "https://b:2/v1"]}
"""
    with pytest.raises(CompileError, match=r"providers\.models\[0\]\.endpoints: endpoints mix http and https"):
        compile_text(config)


@pytest.mark.parametrize("text", ["127.0.0.1", "host:0", "host:99999", ":80", "unix:relative"])
def test_a_malformed_address_setting_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Address.parse(text)
