"""Make before break, against a real Envoy: an edit that adds a cluster and routes to it never
answers 503 while it goes live, and removing them again never does either.

The edit adds a deployment whose health check answers slowly (Envoy keeps a new cluster warming
until its first health check is done, half a second here) and a provider model behind a direct
route. A sidecar that reads the control plane's sidecar data picks the deployment's cluster for
the version each request was routed with, as the real sidecar does. Clients send requests
without pause through the whole edit: before it they get 404 (nothing offers that model or
API), after it 200; a 503 in between is a route that reached Envoy before its cluster was warm
("no cluster"), or a request whose version the sidecar did not hold yet.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import json_format
from xds.type.v3 import typed_struct_pb2

from sr_control.compiler.protos import SIDECAR
from tests.e2e.envoy_proc import Envoy, free_port, wait_for
from tests.e2e.http_client import request as send

pytestmark = [pytest.mark.envoy, pytest.mark.slow]
VLLM_SR = str(Path(sys.executable).parent / "vllm-sr")
HEALTH_DELAY_S = 0.5


class SlowHealthUpstream:
    """Answers GET /health after HEALTH_DELAY_S, anything else at once, naming itself."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else Nagle and delayed ACK stall each keep-alive reply 40 ms

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path == "/health":
                    time.sleep(HEALTH_DELAY_S)
                body = json.dumps({"upstream": "new", "path": self.path}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class VersionedSidecar(pb_grpc.ExternalProcessorServicer):
    """The sidecar's contract (docs/xds/sidecar-versions.md), minimally: keep every version of
    ``sidecar/public`` received over delta ADS; for a request, use the version its route names
    to find the model's deployment and route to its cluster; a version it lacks is a 503."""

    def __init__(self, xds_port: int) -> None:
        self.versions: dict[str, dict[str, Any]] = {}
        self._lock = threading.Condition()
        # Retry soon: the control plane starts after the sidecar here.
        backoff = [
            ("grpc.initial_reconnect_backoff_ms", 50),
            ("grpc.min_reconnect_backoff_ms", 50),
            ("grpc.max_reconnect_backoff_ms", 200),
        ]
        self._channel = grpc.insecure_channel(f"127.0.0.1:{xds_port}", options=backoff)
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        first = discovery_pb2.DeltaDiscoveryRequest(type_url=SIDECAR, resource_names_subscribe=["sidecar/public"])
        first.node.CopyFrom(base_pb2.Node(id="test-sidecar", cluster="vllm-sr"))
        self._requests.put(first)
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(self._channel)
        # wait_for_ready: the sidecar may start before the control plane, as in a pod.
        self._call = stub.DeltaAggregatedResources(iter(self._requests.get, None), wait_for_ready=True)
        threading.Thread(target=self._subscribe, daemon=True).start()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        pb_grpc.add_ExternalProcessorServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _subscribe(self) -> None:
        try:
            for response in self._call:
                for resource in response.resources:
                    data = typed_struct_pb2.TypedStruct()
                    resource.resource.Unpack(data)
                    with self._lock:
                        self.versions[resource.version] = json_format.MessageToDict(data.value)
                self._requests.put(discovery_pb2.DeltaDiscoveryRequest(type_url=SIDECAR, response_nonce=response.nonce))
        except grpc.RpcError:
            pass

    def Process(self, request_iterator, context):  # type: ignore[no-untyped-def]
        version = dict(context.invocation_metadata()).get("x-vsr-config-version", "")
        for req in request_iterator:
            kind = req.WhichOneof("request")
            if kind == "request_headers":
                yield pb.ProcessingResponse(request_headers=pb.HeadersResponse())
            elif kind == "request_body":
                model = json.loads(req.request_body.body)["model"]
                with self._lock:
                    data = self.versions.get(version)
                if data is None:
                    yield _reply(503, f"sidecar: no data for version {version}")
                    return
                entry = data["models"].get(model)
                if entry is None:
                    yield _reply(404, f"model {model} is not offered")
                    return
                cluster = data["deployments"][entry["deployments"][0]]["cluster"]
                header = base_pb2.HeaderValueOption(
                    header=base_pb2.HeaderValue(key="x-vsr-cluster", raw_value=cluster.encode()),
                    append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
                )
                # Clear the route cache so that Envoy picks the cluster from the header.
                common = pb.CommonResponse(
                    header_mutation=pb.HeaderMutation(set_headers=[header]), clear_route_cache=True
                )
                yield pb.ProcessingResponse(request_body=pb.BodyResponse(response=common))
            elif kind == "response_headers":
                yield pb.ProcessingResponse(response_headers=pb.HeadersResponse())
            elif kind == "response_body":
                yield pb.ProcessingResponse(response_body=pb.BodyResponse())

    def stop(self) -> None:
        self._requests.put(None)
        self._call.cancel()
        self._channel.close()
        self.server.stop(grace=None)


def _reply(code: int, message: str) -> pb.ProcessingResponse:
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=code), body=json.dumps({"detail": message}).encode()
        )
    )


def render(ports: dict[str, int], sidecar_upstream: str, new: str | None) -> str:
    text = f"""version: 2
providers:
  models:
    - {{name: llm-a, api_format: chat_completions, endpoints: ["{sidecar_upstream}/v1"]}}
"""
    if new:
        text += f'    - {{name: llm-new, api_format: responses, endpoints: ["{new}/v1"]}}\n'
        text += (
            f'deployments:\n  d-new: {{provider: systemone, endpoint: "{new}/v1/systemone", model: d-new, '
            f"schema: vllm-sr/5.0}}\n"
        )
    text += f"""listeners:
  - name: public
    address: 127.0.0.1
    port: {ports["public"]}
    apis:
      systemone: {{schema: vllm-sr/5.0}}
      chat_completions: {{models: [llm-a]}}
"""
    if new:
        text += "      responses: {models: [llm-new]}\n"
    return text


class Traffic:
    """Clients sending both kinds of request without pause; what each got, in order."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.seen: dict[str, list[int]] = {"systemone": [], "responses": []}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(kind,), daemon=True) for kind in self.seen]
        for t in self._threads:
            t.start()

    def _run(self, kind: str) -> None:
        while not self._stop.is_set():
            if kind == "systemone":
                reply = send(
                    self.port,
                    "POST",
                    "/v1/systemone",
                    json.dumps({"model": "d-new"}).encode(),
                    {"content-type": "application/json"},
                )
            else:
                reply = send(self.port, "POST", "/v1/responses", b"{}", {"content-type": "application/json"})
            self.seen[kind].append(reply.status)

    def stop(self) -> dict[str, list[int]]:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        return self.seen


@pytest.fixture(params=["sotw", "delta"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    ports = {name: free_port() for name in ("public", "admin", "xds", "status")}
    with contextlib.ExitStack() as cleanup:  # what started is stopped, even when setting up fails
        upstream = SlowHealthUpstream()
        cleanup.callback(upstream.stop)
        config = tmp_path / "config.yaml"
        config.write_text(render(ports, upstream.url, None))
        sidecar = VersionedSidecar(ports["xds"])
        cleanup.callback(sidecar.stop)
        compiled = subprocess.run(
            [
                VLLM_SR,
                "config",
                "compile",
                str(config),
                "-o",
                str(tmp_path / "out"),
                "--ads",
                request.param,
                "--xds",
                f"127.0.0.1:{ports['xds']}",
                "--admin",
                f"127.0.0.1:{ports['admin']}",
                "--sidecar",
                f"127.0.0.1:{sidecar.port}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert compiled.returncode == 0, compiled.stderr
        xds = subprocess.Popen(
            [
                VLLM_SR,
                "xds",
                "serve",
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(ports["xds"]),
                "--status-port",
                str(ports["status"]),
                "--sidecar",
                f"127.0.0.1:{sidecar.port}",
                "--poll-interval",
                "0.01",
            ],
            stdout=open(tmp_path / "xds.log", "wb"),
            stderr=subprocess.STDOUT,
        )
        cleanup.callback(_stop, xds)
        wait_for(lambda: sidecar.versions, timeout=30, what="the sidecar to get its data")
        envoy = Envoy(tmp_path / "out" / "bootstrap.yaml", ports["admin"], tmp_path / "envoy.log")
        cleanup.callback(envoy.stop)
        wait_for(
            lambda: send(ports["public"], "POST", "/v1/chat/completions", b"{}").status == 200,
            timeout=30,
            what="Envoy to serve",
        )
        yield {
            "ports": ports,
            "config": config,
            "upstream": upstream,
            "envoy": envoy,
            "sidecar": sidecar,
            "dir": tmp_path,
        }


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def both_answer(port: int, status: int) -> bool:
    systemone = send(
        port, "POST", "/v1/systemone", json.dumps({"model": "d-new"}).encode(), {"content-type": "application/json"}
    ).status
    return systemone == status and send(port, "POST", "/v1/responses", b"{}").status == status


def test_a_new_cluster_is_warm_before_any_route_names_it_and_gone_only_after(stack: dict[str, Any]) -> None:
    ports, config, envoy = stack["ports"], stack["config"], stack["envoy"]
    assert both_answer(ports["public"], 404)

    traffic = Traffic(ports["public"])
    time.sleep(0.2)
    started = time.monotonic()
    write(config, render(ports, stack["upstream"].url, stack["upstream"].url))
    wait_for(lambda: both_answer(ports["public"], 200), timeout=30, what="the new deployment and model to answer")
    live_after = time.monotonic() - started
    time.sleep(0.2)
    seen = traffic.stop()
    for kind, statuses in seen.items():
        assert 503 not in statuses, f"{kind}: {Counter(statuses)} ({live_after:.2f} s to go live)"
        assert statuses[0] == 404 and statuses[-1] == 200, f"{kind}: the test saw no edit: {Counter(statuses)}"
    # The slow health check held the cluster warming: the routes waited for it.
    assert live_after >= HEALTH_DELAY_S

    traffic = Traffic(ports["public"])
    time.sleep(0.2)
    write(config, render(ports, stack["upstream"].url, None))
    wait_for(lambda: both_answer(ports["public"], 404), timeout=30, what="the deployment and model to go")
    time.sleep(0.2)
    seen = traffic.stop()
    for kind, statuses in seen.items():
        assert 503 not in statuses, f"{kind} while removing: {Counter(statuses)}"
        assert statuses[0] == 200 and statuses[-1] == 404, f"{kind}: the test saw no edit: {Counter(statuses)}"
    assert envoy.stat("http.public.no_cluster") == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['status']}/status", timeout=5) as r:
        nodes = {n["id"] for n in json.loads(r.read())["nodes"]}
    assert nodes == {"vllm-sr-envoy", "test-sidecar"}
