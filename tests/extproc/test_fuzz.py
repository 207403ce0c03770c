"""Random and malformed requests, through the gRPC interface and through Envoy: no crash, no 5xx
for a bad request, and the sidecar keeps serving."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sr_control.extproc.server import Worker
from sr_control.extproc.settings import SidecarSettings
from tests.e2e.envoy_proc import free_port, wait_for
from tests.e2e.http_client import request
from tests.extproc.harness import World
from tests.strategies import json_values, near

pytestmark = pytest.mark.envoy

VALID = {"state": "The export fails.", "questions": {"q": {"type": "noul", "instructions": "Is it broken?"}}}
mutated = near(VALID)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated.map(lambda v: json.dumps(v).encode()),
    st.text(max_size=200).map(str.encode),
)
paths = st.sampled_from(["/v1/systemone", "/v1/systemone/batch", "/v1/decisions", "/v1/models", "/v1/systemone/models"])
header_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12).filter(
    lambda n: (
        not n.startswith("x-envoy")
        and n
        not in ("host", "content-length", "transfer-encoding", "connection", "te", "upgrade", "expect", "keep-alive")
    )
)
header_values = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
content_types = st.sampled_from(
    ["application/json", "text/plain", "multipart/form-data; boundary=xyz", "multipart/form-data", ""]
)


@pytest.fixture(scope="module")
def worker(world: World) -> Iterator[Worker]:
    """A sidecar worker in this process, on the world's control plane, driven over gRPC."""
    w = Worker(
        SidecarSettings(xds=f"127.0.0.1:{world.plane.port}", port=free_port(), status_port=0, version_wait_ms=200)
    )
    thread = threading.Thread(target=lambda: asyncio.run(w.run()), daemon=True)
    thread.start()
    wait_for(w.ready, timeout=30, what="the in-process sidecar")
    yield w
    w.stop()
    thread.join(30)


def _exchange(
    port: int | str, metadata: list[tuple[str, str]], path: str, headers: list[tuple[str, str]], body: bytes
) -> list[pb.ProcessingResponse]:
    """One HTTP request as Envoy would send it to the sidecar, up to the sidecar's answer to its
    last message (a request it forwards is then dropped, as a client that goes away). ``port``:
    a loopback port, or a gRPC target such as ``unix:/path``."""
    hs = [
        ("x-request-id", "fuzz"),
        (":method", "GET" if path.endswith("/models") else "POST"),
        (":path", path),
        *headers,
    ]

    def messages() -> Iterator[pb.ProcessingRequest]:
        yield pb.ProcessingRequest(
            request_headers=pb.HttpHeaders(
                headers=base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in hs]),
                end_of_stream=not body,
            )
        )
        if body:
            yield pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))

    with grpc.insecure_channel(port if isinstance(port, str) else f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalProcessorStub(channel)
        out = []
        for response in stub.Process(messages(), metadata=metadata, timeout=10):
            out.append(response)
            if response.HasField("immediate_response") or len(out) == (2 if body else 1):
                break
        return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=paths,
    body=bodies,
    headers=st.lists(st.tuples(header_names, header_values), max_size=4),
    content_type=content_types,
)
def test_random_bodies_over_grpc_get_an_answer_and_never_a_5xx(
    world: World, worker: Worker, path: str, body: bytes, headers: list[tuple[str, str]], content_type: str
) -> None:
    metadata = [
        ("x-vsr-listener", "v50"),
        ("x-vsr-api", "models" if path.endswith("/models") else "systemone"),
        ("x-vsr-config-version", world.plane_sidecar_version("v50")),
    ]
    responses = _exchange(worker.port, metadata, path, [*headers, ("content-type", content_type)], body)
    assert responses, "the sidecar answered nothing"
    last = responses[-1]
    if last.HasField("immediate_response"):
        status = last.immediate_response.status.code
        assert status < 500, last.immediate_response.body[:300]
        json.loads(last.immediate_response.body)  # every answer is JSON in the listener's error form
    else:
        assert last.HasField("request_body")  # forwarded: a cluster is named
        mutation = {
            h.header.key: h.header.raw_value.decode() for h in last.request_body.response.header_mutation.set_headers
        }
        assert mutation["x-vsr-cluster"].startswith("deployment/")


def test_an_unknown_config_version_is_503_with_retry_after_never_another_versions_data(
    world: World, worker: Worker
) -> None:
    metadata = [("x-vsr-listener", "v50"), ("x-vsr-api", "systemone"), ("x-vsr-config-version", "0000000000000000")]
    answer = _exchange(
        worker.port, metadata, "/v1/systemone", [("content-type", "application/json")], json.dumps(VALID).encode()
    )[-1].immediate_response
    assert answer.status.code == 503
    headers = {h.header.key: h.header.raw_value.decode() for h in answer.headers.set_headers}
    assert headers["retry-after"] == "1"
    body = json.loads(answer.body)
    assert body["reason"] == "config_version_unknown" and "0000000000000000" in body["detail"]["message"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=paths | st.text(alphabet="/abcv1-_.%", min_size=1, max_size=30).map(lambda p: "/" + p.lstrip("/")),
    body=bodies,
    content_type=content_types,
)
def test_random_requests_through_envoy_never_get_a_5xx(world: World, path: str, body: bytes, content_type: str) -> None:
    reply = request(world.listeners["v50"], "POST", path, body, {"content-type": content_type} if content_type else {})
    assert reply.status < 500, (reply.status, reply.body[:300])


def test_the_sidecar_still_serves_after_the_fuzzing(world: World) -> None:
    assert world.post("v50", "/v1/systemone", {**VALID, "model": "tiny"}).status == 200
    assert world.sidecar.status()["workers"][0]["ready"]
