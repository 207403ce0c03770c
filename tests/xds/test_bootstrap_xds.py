"""What ``vllm-sr config compile`` writes into ``bootstrap.yaml`` about reaching the control plane:
the reconnect back-off, several replicas, and the certificate Envoy presents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from sr_control.cli import app
from tests.compiler.golden_cases import GOLDEN

runner = CliRunner()


def compile_bootstrap(tmp_path: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    result = runner.invoke(app, ["config", "compile", str(GOLDEN / "aliases.yaml"), "-o", str(tmp_path), *args])
    boot = tmp_path / "bootstrap.yaml"
    return result.exit_code, result.output, yaml.safe_load(boot.read_text()) if boot.exists() else {}


def xds_cluster(boot: dict[str, Any]) -> dict[str, Any]:
    (cluster,) = (c for c in boot["static_resources"]["clusters"] if c["name"] == "vsr/xds")
    return cluster


def hosts(cluster: dict[str, Any]) -> list[str]:
    return [
        f"{e['endpoint']['address']['socket_address']['address']}:{e['endpoint']['address']['socket_address']['port_value']}"
        for e in cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
    ]


def test_envoy_reopens_a_lost_ads_stream_within_half_a_second(tmp_path: Path) -> None:
    code, output, boot = compile_bootstrap(tmp_path)
    assert code == 0, output
    (service,) = boot["dynamic_resources"]["ads_config"]["grpc_services"]
    assert service["envoy_grpc"]["retry_policy"]["retry_back_off"] == {
        "base_interval": "0.100s",
        "max_interval": "0.500s",
    }


def test_one_control_plane_is_one_host_without_health_checks(tmp_path: Path) -> None:
    code, output, boot = compile_bootstrap(tmp_path, "--xds", "127.0.0.1:18000")
    assert code == 0, output
    cluster = xds_cluster(boot)
    assert hosts(cluster) == ["127.0.0.1:18000"]
    assert cluster["lb_policy"] == "LEAST_REQUEST"
    assert "health_checks" not in cluster and "outlier_detection" not in cluster and "transport_socket" not in cluster


def test_replicas_are_hosts_of_the_xds_cluster_checked_and_taken_in_turn(tmp_path: Path) -> None:
    code, output, boot = compile_bootstrap(tmp_path, "--xds", "cp-0.vsr.svc:18000,cp-1.vsr.svc:18000")
    assert code == 0, output
    cluster = xds_cluster(boot)
    assert hosts(cluster) == ["cp-0.vsr.svc:18000", "cp-1.vsr.svc:18000"]
    assert "lb_policy" not in cluster  # ROUND_ROBIN: the field's default, which the YAML leaves out
    (check,) = cluster["health_checks"]
    assert check["interval"] == "1s" and check["unhealthy_threshold"] == 1
    assert cluster["outlier_detection"]["consecutive_local_origin_failure"] == 1


def test_envoy_presents_its_certificate_to_the_control_plane(tmp_path: Path) -> None:
    tls = ["--xds-cert", "/etc/vsr/tls/tls.crt", "--xds-key", "/etc/vsr/tls/tls.key", "--xds-ca", "/etc/vsr/tls/ca.crt"]
    code, output, boot = compile_bootstrap(tmp_path, *tls)
    assert code == 0, output
    context = xds_cluster(boot)["transport_socket"]["typed_config"]["common_tls_context"]
    assert context["tls_certificates"] == [
        {"certificate_chain": {"filename": "/etc/vsr/tls/tls.crt"}, "private_key": {"filename": "/etc/vsr/tls/tls.key"}}
    ]
    assert context["validation_context"]["trusted_ca"] == {"filename": "/etc/vsr/tls/ca.crt"}


def test_part_of_the_certificate_flags_is_refused_naming_the_rest(tmp_path: Path) -> None:
    code, output, _ = compile_bootstrap(tmp_path, "--xds-cert", "/etc/vsr/tls/tls.crt")
    assert code == 2
    assert "missing --xds-key, --xds-ca" in output


def test_a_control_plane_list_with_a_bad_address_is_refused(tmp_path: Path) -> None:
    code, output, _ = compile_bootstrap(tmp_path, "--xds", "127.0.0.1:18000,nowhere")
    assert code == 2
    assert "'nowhere' is not HOST:PORT" in output
