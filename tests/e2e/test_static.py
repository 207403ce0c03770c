"""A real Envoy running ``envoy-static.yaml``: what clients see on each path, with no control plane.

The ext_proc sidecar here is the minimal echo server of ``upstreams.py`` (the real sidecar is a
later part of vllm-sr); upstreams are small HTTP servers on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import zstandard

from sr_control.compiler import Address, Settings, static_bootstrap
from sr_control.compiler.output import to_yaml
from sr_control.compiler.protos import to_dict
from sr_control.config.load import load_text
from tests.e2e.envoy_proc import Envoy, free_port
from tests.e2e.http_client import request
from tests.e2e.upstreams import EchoProcessor, ExtProcServer, Upstream

pytestmark = pytest.mark.envoy


def config(port: int, llm: Upstream, decisions: Upstream) -> str:
    return f"""
version: 2
providers:
  models:
    - {{name: llm-a, api_format: chat_completions, endpoints: ["{llm.url}/v1"]}}
deployments:
  local-d3: {{provider: systemone, endpoint: "{decisions.url}/v1/systemone", model: d3, schema: vllm-sr/5.0}}
listeners:
  - name: public
    address: 127.0.0.1
    port: {port}
    apis:
      systemone: {{schema: vllm-sr/5.0, max_deadline_ms: 3000}}
      chat_completions: {{models: [llm-a]}}
"""


@pytest.fixture(scope="module")
def envoy(
    tmp_path_factory: pytest.TempPathFactory, llm: Upstream, decisions: Upstream, sidecar: ExtProcServer
) -> Iterator[tuple[Envoy, int]]:
    port, admin = free_port(), free_port()
    settings = Settings(sidecar=Address("127.0.0.1", sidecar.port), admin=Address("127.0.0.1", admin))
    directory = tmp_path_factory.mktemp("static")
    path = directory / "envoy-static.yaml"
    path.write_text(to_yaml(to_dict(static_bootstrap(load_text(config(port, llm, decisions)), settings))))
    proxy = Envoy(path, admin, directory / "envoy.log")
    yield proxy, port
    proxy.stop()


def test_system_one_reaches_the_sidecar_with_the_listener_schema(envoy: tuple[Envoy, int]) -> None:
    _, port = envoy
    reply = request(port, "POST", "/v1/systemone", b'{"model": "d3"}', {"content-type": "application/json"})
    assert reply.status == 200
    seen = reply.json()
    assert seen["metadata"]["x-vsr-listener"] == "public"
    assert seen["metadata"]["x-vsr-schema"] == "vllm-sr/5.0"
    assert seen["json"] == {"model": "d3"}


def test_one_llm_model_is_served_straight_from_its_provider(envoy: tuple[Envoy, int]) -> None:
    _, port = envoy
    before = EchoProcessor.streams
    reply = request(port, "POST", "/v1/chat/completions?stream=false", b'{"model": "llm-a"}')
    assert reply.status == 200
    assert reply.json()["upstream"] == "llm"
    assert reply.json()["path"] == "/v1/chat/completions?stream=false"
    assert EchoProcessor.streams == before


@pytest.mark.parametrize(
    ("path", "api"),
    [("/v1/messages", "messages"), ("/v1/responses", "responses"), ("/v1/images/generations", "images")],
)
def test_an_api_the_listener_does_not_offer_is_404_naming_it_without_python(
    envoy: tuple[Envoy, int], path: str, api: str
) -> None:
    _, port = envoy
    before = EchoProcessor.streams
    reply = request(port, "POST", path, b"{}")
    assert reply.status == 404
    assert reply.headers["content-type"] == "application/json"
    message = reply.json()["detail"]["message"]
    assert api in message and "'public'" in message
    assert EchoProcessor.streams == before


def test_an_unknown_path_is_404_naming_the_listener(envoy: tuple[Envoy, int]) -> None:
    _, port = envoy
    reply = request(port, "GET", "/admin/secrets")
    assert reply.status == 404
    assert "'public'" in reply.json()["detail"]["message"]


def test_models_listing_goes_to_the_sidecar_and_only_by_get(envoy: tuple[Envoy, int]) -> None:
    _, port = envoy
    listing = request(port, "GET", "/v1/models")
    assert listing.status == 200 and listing.json()["metadata"]["x-vsr-api"] == "models"
    assert request(port, "DELETE", "/v1/models").status == 405


def test_a_zstd_body_reaches_the_sidecar_decompressed(envoy: tuple[Envoy, int]) -> None:
    _, port = envoy
    body = json.dumps({"state": "x" * 4096}).encode()  # the SDK compresses bodies of 1 KiB and more
    reply = request(
        port, "POST", "/v1/systemone", zstandard.ZstdCompressor().compress(body), {"content-encoding": "zstd"}
    )
    assert reply.status == 200
    assert reply.json()["body_bytes"] == len(body)


def test_the_sidecar_picks_the_upstream_and_a_client_cannot(envoy: tuple[Envoy, int]) -> None:
    _, port = envoy
    body = json.dumps({"cluster": "deployment/local-d3"}).encode()
    reply = request(port, "POST", "/v1/decisions", body, {"x-vsr-cluster": "provider/llm-a"})
    assert reply.status == 200
    assert reply.json()["upstream"] == "decisions"


def test_a_client_routing_header_never_reaches_the_sidecar(envoy: tuple[Envoy, int]) -> None:
    _, port = envoy
    reply = request(port, "POST", "/v1/systemone", b"{}", {"x-vsr-cluster": "provider/llm-a"})
    assert reply.json()["client_cluster"] is None


def test_a_32_mib_body_passes(envoy: tuple[Envoy, int]) -> None:
    _, port = envoy
    body = json.dumps({"cluster": "deployment/local-d3", "pad": "x" * (32 * 1024 * 1024 - 64)}).encode()
    reply = request(port, "POST", "/v1/decisions", body, timeout=60)
    assert reply.status == 200
    assert reply.json()["body_bytes"] == len(body)


def test_envoy_uses_no_deprecated_feature(envoy: tuple[Envoy, int]) -> None:
    proxy, _ = envoy
    assert proxy.stat("runtime.deprecated_feature_use") == 0
