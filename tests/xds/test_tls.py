"""ADS over mTLS: only nodes with a certificate from the control plane's client CA are served.

A node without a certificate, with one from another CA, or speaking plaintext, is refused in
the TLS handshake: it never gets a response, so it reads nothing. Envoy (its bootstrap compiled
with ``--xds-cert/--xds-key/--xds-ca``) and the sidecar (``extproc serve`` with the same flags)
present theirs and are served. Plaintext is refused off loopback unless ``--insecure``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from sr_control.compiler import Address, Settings, bootstrap
from sr_control.compiler.output import to_dict, to_yaml
from sr_control.compiler.protos import CLUSTER
from sr_control.compiler.settings import XdsTls
from sr_control.xds import ControlPlane
from sr_control.xds.tls import ServerTls
from tests.e2e.envoy_proc import Envoy, free_port
from tests.e2e.envoy_proc import wait_for as e2e_wait_for
from tests.extproc.harness import VLLM_SR, SidecarProc, get_status
from tests.xds.certs import Ca, Pem
from tests.xds.xds_support import config_text, wait_for


@dataclass
class Pki:
    ca: Ca
    server: Pem
    envoy: Pem
    sidecar: Pem
    stranger: Pem  # signed by another CA


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = Ca.make(directory, "ads-ca")
    other = Ca.make(directory, "other-ca")
    return Pki(
        ca,
        ca.issue("control-plane", ips=("127.0.0.1",)),
        ca.issue("envoy"),
        ca.issue("sidecar"),
        other.issue("stranger"),
    )


@pytest.fixture
def plane(pki: Pki, tmp_path: Path) -> Iterator[ControlPlane]:
    config = tmp_path / "config.yaml"
    config.write_text(config_text({"public": free_port()}))
    p = ControlPlane(
        config,
        Settings(),
        host="127.0.0.1",
        port=0,
        status_port=0,
        tls=ServerTls(pki.server.cert, pki.server.key, pki.ca.pem),
    )
    p.start()
    yield p
    p.stop()


def first_response(port: int, credentials: grpc.ChannelCredentials | None) -> Any:
    """Subscribe to clusters as a node would: the first response, or the status code it failed with."""
    target = f"127.0.0.1:{port}"
    channel = grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target)
    with channel:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        request = discovery_pb2.DiscoveryRequest(node=base_pb2.Node(id="probe", cluster="probe"), type_url=CLUSTER)
        call = stub.StreamAggregatedResources(iter([request]), timeout=10)
        try:
            return next(call)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[attr-defined]


def credentials(pki: Pki, client: Pem | None) -> grpc.ChannelCredentials:
    if client is None:
        return grpc.ssl_channel_credentials(root_certificates=pki.ca.pem.read_bytes())
    return grpc.ssl_channel_credentials(
        root_certificates=pki.ca.pem.read_bytes(),
        private_key=client.key.read_bytes(),
        certificate_chain=client.cert.read_bytes(),
    )


def test_a_node_with_a_certificate_from_the_client_ca_is_served(pki: Pki, plane: ControlPlane) -> None:
    response = first_response(plane.port, credentials(pki, pki.envoy))
    assert response.type_url == CLUSTER and len(response.resources) > 0


@pytest.mark.parametrize("client", ["no certificate", "another CA's", "plaintext"])
def test_a_node_without_a_valid_certificate_is_refused_before_it_reads_anything(
    pki: Pki, plane: ControlPlane, client: str
) -> None:
    creds = {
        "no certificate": credentials(pki, None),
        "another CA's": credentials(pki, pki.stranger),
        "plaintext": None,
    }[client]
    assert first_response(plane.port, creds) == grpc.StatusCode.UNAVAILABLE
    assert plane.ledger.nodes() == []  # no stream was opened: the handshake failed first


def acked(plane: ControlPlane, cluster: str) -> bool:
    """A node of ``cluster`` has ACKed every type it holds at the version served."""
    served = plane.status()["type_versions"]
    nodes = [n for n in plane.ledger.nodes() if n["cluster"] == cluster]
    return bool(nodes) and all(
        t["acked"] == served[name] for n in nodes for name, t in n["types"].items() if name in served
    )


@pytest.mark.envoy
def test_envoy_and_the_sidecar_present_their_certificates_and_are_served(
    pki: Pki, plane: ControlPlane, tmp_path: Path
) -> None:
    admin = free_port()
    settings = Settings(
        xds=Address("127.0.0.1", plane.port),
        admin=Address("127.0.0.1", admin),
        xds_tls=XdsTls(str(pki.envoy.cert), str(pki.envoy.key), str(pki.ca.pem)),
    )
    boot = tmp_path / "bootstrap.yaml"
    boot.write_text(to_yaml(to_dict(bootstrap(settings))))
    envoy = Envoy(boot, admin, tmp_path / "envoy.log")
    sidecar = SidecarProc(
        tmp_path,
        plane.port,
        args=("--xds-cert", str(pki.sidecar.cert), "--xds-key", str(pki.sidecar.key), "--xds-ca", str(pki.ca.pem)),
    )
    try:
        wait_for(lambda: acked(plane, "vllm-sr"), timeout=30, what="Envoy to ACK over mTLS")
        wait_for(lambda: acked(plane, "vllm-sr-sidecar"), timeout=30, what="the sidecar to ACK over mTLS")
        sidecar.wait()  # ready: it holds its listeners' data, taken over mTLS
    finally:
        envoy.stop()
        sidecar.stop()


# -------------------------------------------------------------------------------- the command line


def serve(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [VLLM_SR, "xds", "serve", "--config", str(config), "--port", "0", "--status-port", "0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_plaintext_off_loopback_is_refused_unless_insecure(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(config_text({"public": free_port()}))
    refused = serve(config, "--host", "0.0.0.0")
    assert refused.returncode == 2
    assert "refusing plaintext ADS on 0.0.0.0" in refused.stderr and "--insecure" in refused.stderr
    assert "Traceback" not in refused.stderr

    status = free_port()
    cmd = [VLLM_SR, "xds", "serve", "--config", str(config), "--host", "0.0.0.0", "--insecure"]
    proc = subprocess.Popen(
        [*cmd, "--port", "0", "--status-port", str(status)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        # (the e2e wait_for: a refused connection before the port is up is retried, not an error)
        e2e_wait_for(lambda: get_status(f"http://127.0.0.1:{status}/healthz", timeout=1) == 200, timeout=60)
    finally:
        proc.terminate()
        proc.wait(30)


def test_half_the_tls_flags_is_refused_naming_what_is_missing(tmp_path: Path, pki: Pki) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(config_text({"public": free_port()}))
    result = serve(config, "--tls-cert", str(pki.server.cert))
    assert result.returncode == 2
    assert "missing --tls-key, --client-ca" in result.stderr


def test_a_key_that_is_not_pem_is_refused_at_start(tmp_path: Path, pki: Pki) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(config_text({"public": free_port()}))
    junk = tmp_path / "key.pem"
    junk.write_text("not a key\n")
    result = serve(config, "--tls-cert", str(pki.server.cert), "--tls-key", str(junk), "--client-ca", str(pki.ca.pem))
    assert result.returncode == 2
    assert f"--tls-key {junk} is not PEM" in result.stderr
    assert "Traceback" not in result.stderr
