"""A real stack for the operator commands: ``vllm-srun serve`` on a tiny checkpoint, ``vllm-sr xds
serve`` as a process keeping its versions under a state directory, ``vllm-sr extproc serve`` and
Envoy. The commands are run as an operator runs them: the console script, against status ports.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sr_control.compiler import compile
from sr_control.compiler.protos import CLUSTER, LISTENER, ROUTE, SIDECAR, TYPE_NAMES
from sr_control.config.load import load_text
from tests.conftest import run_cli
from tests.e2e.envoy_proc import Envoy, free_port, wait_for
from tests.extproc.harness import Runtime, SidecarProc, envoy_for, get_json
from tests.reliability import parts


def config_text(ports: dict[str, int], runtime: str, *, schema: str = "vllm-sr/5.0", extra: str = "") -> str:
    """One runtime behind ``vllm-sr/auto`` on listener ``public``; ``extra`` is appended to the listeners."""
    return f"""version: 2
deployments:
  full: {{provider: systemone, endpoint: "{runtime}/v1/systemone", model: tiny, schema: vllm-sr/5.0}}
pools:
  vllm-sr/auto: {{members: [full]}}
listeners:
  - name: public
    address: 127.0.0.1
    port: {ports["public"]}
    apis:
      systemone: {{schema: {schema}, models: [vllm-sr/auto, tiny], max_deadline_ms: 20000}}
{extra}"""


def second_listener(port: int) -> str:
    return f"""  - name: internal
    address: 127.0.0.1
    port: {port}
    apis:
      systemone: {{models: [tiny], max_deadline_ms: 20000}}
"""


class PlaneProc(parts.PlaneProc):
    """``vllm-sr xds serve --state-dir``: stopped and started again on the same ports."""

    def __init__(self, directory: Path, config: Path, sidecar_port: int) -> None:
        super().__init__(directory, config, sidecar_port, ("--state-dir", str(directory / "state"), "--keep", "5"))
        self.directory = directory

    def start(self) -> PlaneProc:
        super().start()
        self.wait()
        return self


@dataclass
class Live:
    directory: Path
    ports: dict[str, int]
    runtime: Runtime
    plane: PlaneProc
    sidecar: SidecarProc
    envoy: Envoy

    @property
    def config(self) -> Path:
        return self.plane.config

    def text(self, **changes: Any) -> str:
        return config_text(self.ports, self.runtime.url, **changes)

    def status(self) -> dict[str, Any]:
        return get_json(f"http://{self.plane.status_address}/status")[1]  # type: ignore[no-any-return]

    def cli(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """``vllm-sr ARGS`` with this stack's status ports where the verb takes them."""
        return run_cli(*args, timeout=timeout)

    def where(self) -> list[str]:
        """The control plane's status port alone: the verbs find the sidecars from its nodes."""
        return ["--xds", self.plane.status_address]

    def expected(self, text: str) -> dict[str, str]:
        resources = compile(load_text(text), self.plane.settings)
        return {TYPE_NAMES[t]: resources.type_version(t) for t in (CLUSTER, LISTENER, ROUTE, SIDECAR)}

    def wait_synced(self, text: str, timeout: float = 30) -> None:
        """Until Envoy and the sidecar have ACKed every type of what ``text`` compiles to."""
        expected = self.expected(text)

        def synced() -> bool:
            nodes = self.status()["nodes"]
            acked: dict[str, set[str]] = {}
            for node in nodes:
                for name, t in node["types"].items():
                    acked.setdefault(name, set()).add(t.get("acked") or "")
            return len(nodes) >= 2 and all(acked.get(n) == {v} for n, v in expected.items())

        wait_for(synced, timeout=timeout, interval=0.05, what="Envoy and the sidecar to ACK the config")

    def write(self, text: str) -> None:
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config)

    def post(self, port: int, body: Any) -> tuple[int, Any]:
        from tests.e2e.http_client import request

        reply = request(port, "POST", "/v1/systemone", json.dumps(body).encode(), {"content-type": "application/json"})
        return reply.status, reply.json()


@contextmanager
def live_stack(directory: Path, runtime: Runtime) -> Iterator[Live]:
    """Envoy and a sidecar fed by the control plane, before ``runtime``; stopped afterwards."""
    directory.mkdir(parents=True, exist_ok=True)
    ports = {"public": free_port(), "internal": free_port()}
    sidecar_port = free_port()
    config = directory / "config.yaml"
    text = config_text(ports, runtime.url)
    config.write_text(text)
    plane = PlaneProc(directory, config, sidecar_port).start()
    sidecar = envoy = None
    try:
        sidecar = SidecarProc(directory, plane.port, port=sidecar_port).wait()
        envoy = envoy_for(directory, plane, sidecar_port)  # type: ignore[arg-type]
        live = Live(directory, ports, runtime, plane, sidecar, envoy)
        live.wait_synced(text)
    except BaseException:
        for part in (envoy, sidecar, plane):
            if part is not None:
                part.stop()
        raise
    try:
        yield live
    finally:
        envoy.stop()
        sidecar.stop()
        plane.stop()


@contextmanager
def port_taken() -> Iterator[int]:
    """A port something listens on: a listener Envoy is sent for it cannot bind, and Envoy NACKs."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]
