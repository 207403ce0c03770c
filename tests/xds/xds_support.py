"""Test support for the control plane: configs, snapshots, polling, and an ADS client playing Envoy."""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from sr_control.compiler import compile
from sr_control.config.load import load_text
from sr_control.xds.snapshot import Snapshot

T = TypeVar("T")


def config_text(listeners: dict[str, int], apis: str = "{chat_completions: {}}") -> str:
    rows = "\n".join(
        f"  - {{name: {name}, address: 127.0.0.1, port: {port}, apis: {apis}}}" for name, port in listeners.items()
    )
    return f"""version: 2
providers:
  models:
    - {{name: m, api_format: chat_completions, endpoints: ["http://127.0.0.1:9/v1"]}}
listeners:
{rows}
"""


def snapshot(listeners: dict[str, int], generation: int = 1, apis: str = "{chat_completions: {}}") -> Snapshot:
    return Snapshot.of(compile(load_text(config_text(listeners, apis))), generation)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, what: str = "condition") -> T:
    """Poll until ``predicate()`` is truthy and return it; bounded, not a timed assertion."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


NODE = base_pb2.Node(id="envoy-test", cluster="test")


class AdsClient:
    """One ADS stream over real gRPC, driven request by request as Envoy would."""

    def __init__(self, port: int, delta: bool = False) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(self.channel)
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.responses: queue.SimpleQueue[Any] = queue.SimpleQueue()
        call = stub.DeltaAggregatedResources if delta else stub.StreamAggregatedResources
        self._call = call(self._iterate())
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _iterate(self) -> Iterator[Any]:
        while True:
            item = self._requests.get()
            if item is None:
                return
            yield item

    def _read(self) -> None:
        try:
            for response in self._call:
                self.responses.put(response)
        except grpc.RpcError:
            pass

    def send(self, request: Any) -> None:
        self._requests.put(request)

    def receive(self, timeout: float = 5.0) -> Any:
        return self.responses.get(timeout=timeout)

    def nothing_within(self, seconds: float) -> bool:
        """True when no response arrives in ``seconds`` (a check that nothing is sent, not a timing)."""
        try:
            self.responses.get(timeout=seconds)
        except queue.Empty:
            return True
        return False

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()
        self.channel.close()


def sotw_request(
    type_url: str, version: str = "", nonce: str = "", names: tuple[str, ...] = (), error: str = ""
) -> discovery_pb2.DiscoveryRequest:
    req = discovery_pb2.DiscoveryRequest(
        type_url=type_url, version_info=version, response_nonce=nonce, resource_names=list(names), node=NODE
    )
    if error:
        req.error_detail.message = error
    return req
