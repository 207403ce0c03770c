"""Small real servers for Envoy to talk to: an HTTP upstream and a minimal ext_proc sidecar.

The ext_proc server stands in for the sidecar (a later part of vllm-sr): it answers with what
Envoy told it, so a test can see which listener, API, schema and config version a route carries.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2

MAX_MESSAGE = 64 * 1024 * 1024


class Upstream:
    """Answers every request with JSON saying who it is and what it received."""

    def __init__(self, name: str) -> None:
        self.name = name
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Without this, headers and body go out in two sends and Nagle plus delayed ACK
            # stall every keep-alive request through Envoy by 40 ms.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("content-length") or 0))

            def _answer(self) -> None:
                body = self._body()
                delay = int(self.headers.get("x-test-delay-ms") or 0)
                if delay:
                    time.sleep(delay / 1000)
                out = json.dumps(
                    {
                        "upstream": outer.name,
                        "method": self.command,
                        "path": self.path,
                        "host": self.headers.get("host"),
                        "body_bytes": len(body),
                        "x-vsr-cluster": self.headers.get("x-vsr-cluster"),
                        "authorization": self.headers.get("authorization"),
                        "x-api-key": self.headers.get("x-api-key"),
                        "api-key": self.headers.get("api-key"),
                        "x-envoy-original-path": self.headers.get("x-envoy-original-path"),
                        "x-request-id": self.headers.get("x-request-id"),
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, raw_value=value.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


class EchoProcessor(pb_grpc.ExternalProcessorServicer):
    streams = 0  # how many requests Envoy sent to the sidecar

    """The sidecar's protocol, minimally.

    ``/v1/decisions``: route to the cluster named in the body's ``"cluster"`` by setting
    ``x-vsr-cluster`` (overwriting any client copy) and clearing the route cache. Any other
    path: answer 200 at once with the gRPC metadata Envoy sent and the body it read.
    """

    def Process(self, request_iterator, context):  # type: ignore[no-untyped-def]
        type(self).streams += 1
        metadata = {k: v for k, v in context.invocation_metadata() if k.startswith("x-vsr-")}
        path = ""
        client_cluster = None
        for req in request_iterator:
            kind = req.WhichOneof("request")
            if kind == "request_headers":
                headers = {
                    h.key: (h.raw_value or h.value.encode()).decode() for h in req.request_headers.headers.headers
                }
                path = headers.get(":path", "")
                client_cluster = headers.get("x-vsr-cluster")
                if req.request_headers.end_of_stream:
                    yield self._echo(metadata, path, b"", client_cluster)
                    return
                yield pb.ProcessingResponse(request_headers=pb.HeadersResponse())
            elif kind == "request_body":
                body = req.request_body.body
                if path.startswith("/v1/decisions"):
                    cluster = json.loads(body)["cluster"]
                    common = pb.CommonResponse(
                        header_mutation=pb.HeaderMutation(set_headers=[_header("x-vsr-cluster", cluster)]),
                        clear_route_cache=True,
                    )
                    yield pb.ProcessingResponse(request_body=pb.BodyResponse(response=common))
                else:
                    yield self._echo(metadata, path, body, client_cluster)
                    return
            elif kind == "response_headers":
                yield pb.ProcessingResponse(response_headers=pb.HeadersResponse())
            elif kind == "response_body":
                yield pb.ProcessingResponse(response_body=pb.BodyResponse())

    @staticmethod
    def _echo(metadata: dict[str, str], path: str, body: bytes, client_cluster: str | None) -> pb.ProcessingResponse:
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = "<not json>"
        out = json.dumps(
            {
                "metadata": metadata,
                "path": path,
                "body_bytes": len(body),
                "json": parsed,
                "client_cluster": client_cluster,
            }
        )
        return pb.ProcessingResponse(
            immediate_response=pb.ImmediateResponse(
                status=http_status_pb2.HttpStatus(code=http_status_pb2.OK),
                headers=pb.HeaderMutation(set_headers=[_header("content-type", "application/json")]),
                body=out.encode(),
            )
        )


class ExtProcServer:
    def __init__(self) -> None:
        # 32 MiB bodies (docs/xds/compile.md, 32 MiB bodies) exceed grpcio's 4 MiB default.
        options = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=options)
        self.processor = EchoProcessor()
        pb_grpc.add_ExternalProcessorServicer_to_server(self.processor, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)
