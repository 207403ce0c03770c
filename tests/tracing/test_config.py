"""``tracing:`` in the router config: read with line:column errors, explained, and compiled into
Envoy's connection manager, a collector cluster and the sidecar's data; absent, nothing at all."""

from __future__ import annotations

from typing import Any

from sr_control.compiler import Resources, compile
from sr_control.compiler.incremental import Recompiler
from sr_control.compiler.protos import CLUSTER, LISTENER, SIDECAR, to_dict
from sr_control.config import load as loader
from sr_control.config.explain import explain, explain_text

BASE = """\
version: 2
deployments:
  full: {provider: systemone, endpoint: "http://127.0.0.1:8100/v1/systemone", model: tiny, schema: vllm-sr/5.0}
listeners:
  - name: public
    address: 127.0.0.1
    port: 8080
    apis:
      systemone: {models: [tiny]}
  - name: internal
    address: 127.0.0.1
    port: 8081
    apis:
      systemone: {models: [tiny]}
"""
TRACED = BASE + "tracing: {otlp_endpoint: 'otel-collector.observability:4317', sample_rate: 25}\n"


def _managers(resources: Resources) -> dict[str, dict[str, Any]]:
    """Each listener's HTTP connection manager config, by listener name."""
    out = {}
    for resource in resources[LISTENER]:
        listener = to_dict(resource.message)
        out[resource.name] = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return out


def _sidecar_data(resources: Resources) -> dict[str, dict[str, Any]]:
    return {r.name: to_dict(r.message)["value"] for r in resources[SIDECAR]}


def test_without_tracing_nothing_is_compiled_for_it() -> None:
    resources = compile(loader.load_text(BASE))
    assert all("tracing" not in hcm for hcm in _managers(resources).values())
    assert "vsr/otlp" not in resources.names(CLUSTER)
    assert all("tracing" not in data for data in _sidecar_data(resources).values())


def test_tracing_compiles_to_envoys_opentelemetry_tracer_and_a_collector_cluster() -> None:
    resources = compile(loader.load_text(TRACED))
    for hcm in _managers(resources).values():
        assert hcm["tracing"] == {
            "random_sampling": {"value": 25.0},
            "spawn_upstream_span": True,
            "custom_tags": [{"tag": "http.url", "value": "%PATH(NQ:ORIG_OR_PATH)%"}],
            "provider": {
                "name": "envoy.tracers.opentelemetry",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
                    "grpc_service": {"envoy_grpc": {"cluster_name": "vsr/otlp"}, "timeout": "2s"},
                    "service_name": "vllm-sr-envoy",
                },
            },
        }
    cluster = to_dict(resources.named(CLUSTER)["vsr/otlp"].message)
    assert cluster["type"] == "STRICT_DNS"
    endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert endpoint == {"socket_address": {"address": "otel-collector.observability", "port_value": 4317}}
    # OTLP/gRPC: the collector is spoken to over HTTP/2.
    options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in options["explicit_http_config"]
    for data in _sidecar_data(resources).values():
        assert data["tracing"] == {
            "otlp_endpoint": "otel-collector.observability:4317",
            "sample_rate": 25.0,
            "service_name": "vllm-sr",
        }


def test_turning_tracing_on_and_off_recompiles_every_listener() -> None:
    recompiler = Recompiler()
    for text in (BASE, TRACED, TRACED.replace("sample_rate: 25", "sample_rate: 5"), BASE):
        config = loader.load_text(text)
        again = recompiler.compile(config)
        fresh = compile(config)
        assert again.version == fresh.version, text


def test_a_bad_tracing_block_is_reported_at_its_line_and_column() -> None:
    text = BASE + "tracing:\n  otlp_endpoint: http://collector\n  sample_rate: 101\n  exporter: zipkin\n"
    problems = [str(p) for p in loader.validate_text(text, "c.yaml").problems]
    assert problems == [
        "c.yaml:16:18: error: tracing.otlp_endpoint: 'http://collector' is not HOST:PORT "
        "(an OTLP/gRPC collector, such as otel-collector:4317)",
        "c.yaml:17:16: error: tracing.sample_rate: must be less than or equal to 100 (got 101)",
        "c.yaml:18:3: error: tracing.exporter: unknown field 'exporter'",
    ]


def test_explain_says_where_spans_go() -> None:
    explained = explain(loader.load_text(TRACED))
    assert explained["tracing"] == {
        "otlp_endpoint": "otel-collector.observability:4317",
        "sample_rate": 25.0,
        "service_name": "vllm-sr",
    }
    assert explain_text(explained).endswith(
        "tracing: 25% of requests to OTLP collector otel-collector.observability:4317, "
        "as vllm-sr-envoy, -sidecar and -runtime\n"
    )
    assert "tracing" not in explain(loader.load_text(BASE))
