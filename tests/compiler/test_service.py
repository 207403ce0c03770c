"""A deployment backed by a Kubernetes Service: an EDS cluster under a control plane, the
Service's DNS name where everything is inline, and the Service's URL for the sidecar's calls."""

from __future__ import annotations

from pathlib import Path

from sr_control.compiler import static_bootstrap
from sr_control.compiler.protos import SIDECAR, to_dict
from sr_control.config.load import load_text, validate_text
from sr_control.extproc.data import ListenerData
from tests.compiler.compiled import cluster, compile_text

CONFIG = """
version: 2
deployments:
  gpu: {provider: systemone, service: {name: rt-gpu, namespace: ml, port: 8100}, model: d3, schema: vllm-sr/5.0}
  near:
    provider: systemone
    service: {name: rt-cpu, port: 8200, path: /api/v1/systemone}
    model: d3
    schema: vllm-sr/5.0
  fixed: {provider: systemone, endpoint: "http://10.0.0.1:8100/v1/systemone", model: d3, schema: vllm-sr/5.0}
pools:
  vllm-sr/auto: {members: [gpu, near, fixed]}
listeners:
  - {name: public, port: 8801, apis: {systemone: {models: [vllm-sr/auto]}}}
"""


def test_a_service_deployment_is_an_eds_cluster_fed_over_ads() -> None:
    gpu = cluster(compile_text(CONFIG), "deployment/gpu")
    assert gpu["type"] == "EDS"
    assert gpu["eds_cluster_config"] == {"eds_config": {"ads": {}, "resource_api_version": "V3"}}
    assert "load_assignment" not in gpu  # the hosts arrive as endpoints, never in the cluster
    # A pod that turns unready often still answers /health: drop it when discovery does.
    assert gpu["ignore_health_on_host_removal"] is True
    assert gpu["health_checks"][0]["http_health_check"]["path"] == "/health"
    assert gpu["circuit_breakers"]["thresholds"][0]["max_requests"] == 8  # max_concurrency still applies
    fixed = cluster(compile_text(CONFIG), "deployment/fixed")
    assert fixed["type"] == "STATIC" and "ignore_health_on_host_removal" not in fixed


def test_without_a_control_plane_the_service_dns_name_is_resolved() -> None:
    boot = to_dict(static_bootstrap(load_text(CONFIG)))
    clusters = {c["name"]: c for c in boot["static_resources"]["clusters"]}
    for name, host, port in (("deployment/gpu", "rt-gpu.ml.svc", 8100), ("deployment/near", "rt-cpu", 8200)):
        c = clusters[name]
        assert c["type"] == "STRICT_DNS"
        (endpoint,) = c["load_assignment"]["endpoints"][0]["lb_endpoints"]
        assert endpoint["endpoint"]["address"]["socket_address"] == {"address": host, "port_value": port}


def test_the_sidecar_reads_the_services_url_for_the_calls_it_makes_itself() -> None:
    sidecar = compile_text(CONFIG).named(SIDECAR)["sidecar/public"]
    payload = to_dict(sidecar.message)["value"]
    data = ListenerData.of(payload, sidecar.version)  # the sidecar's own reader: no DataError
    gpu, near = data.members["gpu"], data.members["near"]
    assert (gpu.cluster, gpu.origin, gpu.systemone_path) == (
        "deployment/gpu",
        "http://rt-gpu.ml.svc:8100",
        "/v1/systemone",
    )
    assert (near.origin, near.prefix, near.path("/v1/models")) == ("http://rt-cpu:8200", "/api", "/api/v1/models")


def test_config_compile_validate_has_envoy_accept_both_bootstraps(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "router.yaml"
    config.write_text(CONFIG)
    result = cli("config", "compile", str(config), "-o", str(tmp_path / "out"), "--validate")
    assert result.returncode == 0, result.stderr


def test_endpoint_and_service_are_exclusive_and_one_is_needed() -> None:
    text = """version: 2
deployments:
  both: {provider: systemone, endpoint: "http://x:1/v1/systemone", service: {name: rt, port: 80}, model: a}
  neither: {provider: systemone, model: b}
  bad: {provider: systemone, service: {name: RT_1, namespace: ml., port: 70000, path: v1}, model: c}
"""
    problems = [str(p) for p in validate_text(text, "router.yaml").errors]
    assert problems == [
        "router.yaml:3:3: error: deployments.both: give endpoint or service, not both",
        "router.yaml:4:3: error: deployments.neither: give endpoint (a URL) or service (a Kubernetes Service)",
        (
            "router.yaml:5:46: error: deployments.bad.service.name: 'RT_1' is not a Kubernetes Service name: "
            "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit (at "
            "most 63)"
        ),
        (
            "router.yaml:5:63: error: deployments.bad.service.namespace: 'ml.' is not a Kubernetes namespace: "
            "lowercase letters, digits and '-', starting with a letter or digit and ending with a letter or "
            "digit (at most 63)"
        ),
        "router.yaml:5:74: error: deployments.bad.service.port: must be less than or equal to 65535 (got 70000)",
        (
            "router.yaml:5:87: error: deployments.bad.service.path: 'v1' is not a URL path (it starts with '/' "
            "and has no spaces, '?' or '#')"
        ),
    ]
