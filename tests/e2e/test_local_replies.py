"""Envoy's own answers in each listener's JSON error form (issue 22: a 40 MiB body got Envoy's
plain-text "Payload Too Large", a 100 KB header "Request Header Fields Too Large", Envoy's
timeouts an empty 504, and ``GET /v1/systemone`` a 422).

A real Envoy runs the compiled static bootstrap for two listeners, one per listener schema.
The sidecar here is a small processor that misbehaves on request (hangs past the message
timeout, fails its stream, names a cluster that does not exist or a slow member with a short
timeout), which the real sidecar never does on purpose; what Envoy answers then is the subject.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2

from sr_control.compiler import Address, Settings, names, static_bootstrap
from sr_control.compiler.limits import BODY_LIMIT
from sr_control.compiler.local_replies import HEADERS_LIMIT
from sr_control.compiler.output import to_yaml
from sr_control.compiler.protos import to_dict
from sr_control.config.load import load_text
from tests.e2e.envoy_proc import Envoy, free_port
from tests.e2e.http_client import Reply, request
from tests.e2e.upstreams import MAX_MESSAGE, Upstream

pytestmark = pytest.mark.envoy

# A listener reads System One in one of these (systemone/0.2 is a deployment schema only).
SCHEMAS = {"v50": "vllm-sr/5.0", "v40": "vllm-sr/4.0"}
# The message timeout is the listener's deadline plus the compiler's margin: keep it short.
DEADLINE_MS = 100


def _set(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, raw_value=value.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


class Misbehaving(pb_grpc.ExternalProcessorServicer):
    """Reads the body's ``do``: ``hang`` (past the message timeout), ``fail`` (ends its stream
    with an error), ``forward`` (to ``cluster``, with Envoy's upstream timeout ``timeout_ms``);
    anything else is answered 200 at once."""

    def Process(
        self, request_iterator: Iterator[pb.ProcessingRequest], context: grpc.ServicerContext
    ) -> Iterator[pb.ProcessingResponse]:
        for req in request_iterator:
            kind = req.WhichOneof("request")
            if kind == "request_headers":
                if req.request_headers.end_of_stream:
                    yield pb.ProcessingResponse(
                        immediate_response=pb.ImmediateResponse(status=http_status_pb2.HttpStatus(code=200), body=b"{}")
                    )
                    return
                yield pb.ProcessingResponse(request_headers=pb.HeadersResponse())
            elif kind == "request_body":
                doc = json.loads(req.request_body.body or b"{}")
                do = doc.get("do")
                if do == "hang":
                    time.sleep(4)
                    return
                if do == "fail":
                    context.abort(grpc.StatusCode.INTERNAL, "a sidecar that fails")
                if do == "forward":
                    sets = [
                        _set(names.CLUSTER_HEADER, doc["cluster"]),
                        _set("x-envoy-upstream-rq-timeout-ms", str(doc.get("timeout_ms", 5000))),
                    ]
                    sets.append(_set("x-test-delay-ms", str(doc.get("delay_ms", 0))))
                    common = pb.CommonResponse(
                        header_mutation=pb.HeaderMutation(set_headers=sets), clear_route_cache=True
                    )
                    yield pb.ProcessingResponse(request_body=pb.BodyResponse(response=common))
                    continue
                yield pb.ProcessingResponse(
                    immediate_response=pb.ImmediateResponse(
                        status=http_status_pb2.HttpStatus(code=200), body=b'{"ok":true}'
                    )
                )
                return
            elif kind == "response_headers":
                yield pb.ProcessingResponse(response_headers=pb.HeadersResponse())
            elif kind == "response_body":
                yield pb.ProcessingResponse(response_body=pb.BodyResponse())


@pytest.fixture(scope="module")
def listeners(tmp_path_factory: pytest.TempPathFactory, decisions: Upstream) -> Iterator[dict[str, int]]:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.max_receive_message_length", MAX_MESSAGE)]
    )
    pb_grpc.add_ExternalProcessorServicer_to_server(Misbehaving(), server)
    sidecar = server.add_insecure_port("127.0.0.1:0")
    server.start()
    ports = {name: free_port() for name in SCHEMAS}
    admin = free_port()
    text = f"""
version: 2
deployments:
  d3: {{provider: systemone, endpoint: "{decisions.url}/v1/systemone", model: d3, schema: vllm-sr/5.0}}
listeners:
""" + "".join(
        (
            f"  - {{name: {name}, address: 127.0.0.1, port: {ports[name]}, apis: {{systemone: {{schema: "
            f"{schema}, models: [d3], max_deadline_ms: {DEADLINE_MS}}}}}}}\n"
        )
        for name, schema in SCHEMAS.items()
    )
    settings = Settings(sidecar=Address("127.0.0.1", sidecar), admin=Address("127.0.0.1", admin))
    directory = tmp_path_factory.mktemp("local-replies")
    path = directory / "envoy-static.yaml"
    path.write_text(to_yaml(to_dict(static_bootstrap(load_text(text), settings))))
    proxy = Envoy(path, admin, directory / "envoy.log")
    yield ports
    proxy.stop()
    server.stop(grace=None)


def _post(port: int, doc: dict[str, Any], **headers: str) -> Reply:
    return request(
        port, "POST", "/v1/systemone", json.dumps(doc).encode(), {"content-type": "application/json", **headers}
    )


def _big_body(port: int, size: int) -> Reply:
    """POST ``size`` bytes as a client that reads the answer as soon as it comes: Envoy answers
    413 once its buffer is full and stops reading, so a client that only writes would block."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            (
                "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                f"content-length: {size}\r\n\r\n"
            ).encode()
        )
        chunk = b" " * (1 << 20)
        sent = 0
        while sent < size and not select.select([s], [], [], 0)[0]:
            n = s.send(chunk[: size - sent])
            sent += n
        raw = b""
        while True:
            part = s.recv(65536)
            if not part:
                break
            raw += part
            head, sep, body = raw.partition(b"\r\n\r\n")
            length = next(
                (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")), None
            )
            if sep and length is not None and len(body) >= length:
                break
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return Reply(int(lines[0].split()[1]), headers, body)


def _check(reply: Reply, listener: str, status: int, code: str) -> dict[str, Any]:
    """The reply is ``status`` in ``listener``'s error form with ``code``, and returns the body."""
    assert reply.status == status, (reply.status, reply.body)
    assert reply.headers["content-type"] == "application/json", reply.headers
    body: dict[str, Any] = json.loads(reply.body)
    assert isinstance(body["detail"], dict) and body["detail"]["message"] and body["detail"]["error_type"]
    assert body["code"] == code
    if SCHEMAS[listener] == "vllm-sr/4.0":
        assert body["error"]["code"] == code and body["error"]["message"] == body["detail"]["message"]
    else:
        assert "error" not in body
    return body


@pytest.mark.parametrize("listener", SCHEMAS)
def test_a_body_over_the_buffer_is_413_in_the_listeners_form(listeners: dict[str, int], listener: str) -> None:
    body = _check(_big_body(listeners[listener], 40 * 1024 * 1024), listener, 413, "request_too_large")
    assert body.get("limit", BODY_LIMIT) == BODY_LIMIT


@pytest.mark.parametrize("listener", SCHEMAS)
def test_headers_over_the_limit_are_431_in_the_listeners_form(listeners: dict[str, int], listener: str) -> None:
    reply = _post(listeners[listener], {}, **{"x-big": "a" * 100_000})
    body = _check(reply, listener, 431, "request_too_large")
    assert body.get("limit", HEADERS_LIMIT) == HEADERS_LIMIT


@pytest.mark.parametrize("listener", SCHEMAS)
def test_get_on_system_one_is_405_allowing_post(listeners: dict[str, int], listener: str) -> None:
    reply = request(listeners[listener], "GET", "/v1/systemone")
    _check(reply, listener, 405, "method_not_allowed")
    assert reply.headers["allow"] == "POST"


@pytest.mark.parametrize("listener", SCHEMAS)
def test_an_unknown_path_is_404_in_the_listeners_form(listeners: dict[str, int], listener: str) -> None:
    body = _check(request(listeners[listener], "POST", "/v2/nothing", b"{}"), listener, 404, "not_found")
    assert f"listener {listener!r}" in body["detail"]["message"]


@pytest.mark.parametrize("listener", SCHEMAS)
def test_envoys_timeouts_are_504_deadline_exceeded_never_empty(listeners: dict[str, int], listener: str) -> None:
    # The sidecar took longer than the message timeout.
    _check(_post(listeners[listener], {"do": "hang"}), listener, 504, "deadline_exceeded")
    # The member took longer than the upstream timeout.
    slow = {"do": "forward", "cluster": names.deployment_cluster("d3"), "timeout_ms": 100, "delay_ms": 2000}
    _check(_post(listeners[listener], slow), listener, 504, "deadline_exceeded")


@pytest.mark.parametrize("listener", SCHEMAS)
def test_no_cluster_is_503_unavailable_with_retry_after(listeners: dict[str, int], listener: str) -> None:
    reply = _post(listeners[listener], {"do": "forward", "cluster": "deployment/gone"})
    _check(reply, listener, 503, "unavailable")
    assert reply.headers["retry-after"] == "1"


@pytest.mark.parametrize("listener", SCHEMAS)
def test_a_failed_sidecar_is_500_in_the_listeners_form(listeners: dict[str, int], listener: str) -> None:
    _check(_post(listeners[listener], {"do": "fail"}), listener, 500, "internal_error")


def test_the_sidecars_own_answers_and_members_replies_are_left_as_they_are(listeners: dict[str, int]) -> None:
    assert _post(listeners["v50"], {}).body == b'{"ok":true}'  # an immediate answer with no content-type
    forwarded = _post(listeners["v50"], {"do": "forward", "cluster": names.deployment_cluster("d3")})
    assert forwarded.status == 200 and forwarded.json()["upstream"] == "decisions"
