"""Real parts for the sidecar's tests, each started as a user starts it and stopped by the test.

Runtime     ``vllm-srun serve`` on a tiny checkpoint (a process)
Mock        the third-party ``jevcompat mock`` (a thread), recording the calls it gets
Plane       the control plane on a config file (in this process), edited as a user does
SidecarProc ``vllm-sr extproc serve`` (a process)
World       all of them with a real Envoy fed over xDS, on loopback ports
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jevcompat import mock as jev_mock
from safetensors.torch import load_file, save_file

from sr_control.compiler import Address, Settings, bootstrap, compile
from sr_control.compiler.output import to_yaml
from sr_control.compiler.protos import CLUSTER, LISTENER, ROUTE, SIDECAR, TYPE_NAMES, to_dict
from sr_control.config.load import load_text
from sr_control.xds import ControlPlane
from tests.e2e.envoy_proc import Envoy, free_port, wait_for
from tests.e2e.http_client import Reply, request

BIN = Path(sys.executable).parent
VLLM_SR = str(BIN / "vllm-sr")
VLLM_SRUN = str(BIN / "vllm-srun")


def get_json(url: str, timeout: float = 5) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def get_status(url: str, timeout: float = 5) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def get_text(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of Prometheus text (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head == name and not labels:
            return float(value)
        if "{" in head and head.split("{", 1)[0] == name:
            got = dict(part.split("=", 1) for part in head.split("{", 1)[1].rstrip("}").split(",") if part)
            if all(got.get(k) == f'"{v}"' for k, v in labels.items()):
                total += float(value)
    return total


def capped_checkpoint(source: Path, target: Path, codes: int) -> Path:
    """A copy of ``source`` whose readout has only its first ``codes`` codes: its card then says
    ``max_options: codes``, as a smaller trained head would."""
    shutil.copytree(source, target)
    config = json.loads((target / "decision_config.json").read_text())
    config["codes"], config["token_ids"] = config["codes"][:codes], config["token_ids"][:codes]
    (target / "decision_config.json").write_text(json.dumps(config, indent=2))
    readout = load_file(str(target / "readout.safetensors"))
    save_file({"weight": readout["weight"][:codes].contiguous()}, str(target / "readout.safetensors"))
    return target


class Runtime:
    """``vllm-srun serve`` as a process; ``start()`` returns at once, ``wait()`` until ready."""

    def __init__(
        self,
        folder: Path,
        log: Path,
        *,
        schema: str = "vllm-sr/5.0",
        port: int | None = None,
        api_key: str | None = None,
    ) -> None:
        self.folder, self.log, self.schema, self.api_key = folder, log, schema, api_key
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Runtime:
        args = [
            VLLM_SRUN,
            "serve",
            str(self.folder),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--systemone-schema",
            self.schema,
        ]
        env = dict(os.environ)
        if self.api_key:
            args += ["--api-key-env", "VSR_TEST_RUNTIME_KEY"]
            env["VSR_TEST_RUNTIME_KEY"] = self.api_key
        self.proc = subprocess.Popen(args, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env=env)
        return self

    def wait(self, timeout: float = 180) -> Runtime:
        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, f"runtime exited: {self.log.read_text()[-2000:]}"
            return get_status(f"{self.url}/health", timeout=1) == 200

        wait_for(ready, timeout=timeout, interval=0.1, what=f"runtime {self.folder.name} on :{self.port}")
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def requests_served(self, endpoint: str) -> float:
        return metric(get_text(f"{self.url}/metrics"), "vsr_runtime_requests_total", endpoint=endpoint)


class Mock:
    """The jevcompat reference server in a thread, keeping the body of every call it gets."""

    def __init__(self, **config: Any) -> None:
        self.bodies: list[Any] = []
        recorded = self.bodies
        cfg = jev_mock.MockConfig(**config)

        class Recording(jev_mock.Handler):  # type: ignore[misc, name-defined]
            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    recorded.append(json.loads(raw))
                except ValueError:
                    recorded.append(raw)
                self.rfile = io.BytesIO(raw)
                super().do_POST()

        Recording.cfg = cfg
        from http.server import ThreadingHTTPServer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
        self.server.daemon_threads = True
        self.server.verbose = False  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Plane:
    """The control plane on ``config.yaml`` in ``directory``, in this process."""

    def __init__(self, directory: Path, text: str, sidecar_port: int) -> None:
        self.config = directory / "config.yaml"
        self.write(text)
        self.settings = Settings(sidecar=Address("127.0.0.1", sidecar_port))
        self.plane = ControlPlane(
            self.config, self.settings, host="127.0.0.1", port=0, status_port=0, poll_interval=0.01
        )
        self.plane.start()
        self.port = self.plane.port
        self.status_url = f"http://127.0.0.1:{self.plane.status_port}/status"

    def write(self, text: str) -> None:
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config)  # as editors save: a new file renamed over the old one

    def version(self) -> str:
        return str(get_json(self.status_url)[1]["version"])

    def stop(self) -> None:
        self.plane.stop()


class SidecarProc:
    def __init__(
        self,
        directory: Path,
        xds_port: int,
        *,
        port: int | None = None,
        workers: int = 1,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.port = port or free_port()
        self.status_port = free_port()
        self.log = directory / f"extproc-{self.port}.log"
        cmd = [
            VLLM_SR,
            "--log-format",
            "json",
            "extproc",
            "serve",
            "--xds",
            f"127.0.0.1:{xds_port}",
            "--port",
            str(self.port),
            "--status-port",
            str(self.status_port),
            "--workers",
            str(workers),
            *args,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        self.url = f"http://127.0.0.1:{self.status_port}"

    def wait(self, timeout: float = 60) -> SidecarProc:
        def ready() -> bool:
            assert self.proc.poll() is None, f"sidecar exited: {self.log.read_text()[-3000:]}"
            return get_status(f"{self.url}/healthz", timeout=1) == 200

        wait_for(ready, timeout=timeout, interval=0.05, what="the sidecar to be ready")
        return self

    def metrics(self) -> str:
        return get_text(f"{self.url}/metrics")

    def status(self) -> dict[str, Any]:
        return get_json(f"{self.url}/status")[1]  # type: ignore[no-any-return]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@dataclass
class World:
    """Runtimes, a mock, the control plane, the sidecar and Envoy, on one config."""

    directory: Path
    listeners: dict[str, int]
    runtimes: dict[str, Runtime]
    mock: Mock
    busy: Mock  # answers every call 429 with Retry-After: 0
    plane: Plane
    sidecar: SidecarProc
    envoy: Envoy
    render: Any  # (**changes) -> config text
    extra: dict[str, Any] = field(default_factory=dict)

    def post(self, listener: str, path: str, body: Any, **headers: str) -> Reply:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return request(self.listeners[listener], "POST", path, data, {"content-type": "application/json", **headers})

    def mock_direct(self, body: Any) -> Any:
        """What the mock answers when called directly (no sidecar, no Envoy)."""
        port = int(self.mock.url.rsplit(":", 1)[1])
        reply = request(port, "POST", "/v1/systemone", json.dumps(body).encode(), {"content-type": "application/json"})
        assert reply.status == 200, reply.body
        return reply.json()

    def plane_sidecar_version(self, listener: str) -> str:
        """The version of ``sidecar/<listener>`` the control plane serves now, as its ``/status``
        shows it (``listener_versions``)."""
        snapshot = self.plane.plane.reloader.snapshot
        assert snapshot is not None
        shown: str = self.plane.plane.status()["listener_versions"][listener]
        assert shown == snapshot.resources.named(SIDECAR)[f"sidecar/{listener}"].version
        return shown

    def get(self, listener: str, path: str, **headers: str) -> Reply:
        return request(self.listeners[listener], "GET", path, None, headers)

    def url(self, listener: str) -> str:
        return f"http://127.0.0.1:{self.listeners[listener]}"

    def apply(self, text: str) -> None:
        """Edit the config and wait until Envoy and the sidecar have both ACKed what it compiles to."""
        self.plane.write(text)
        expected = compile(load_text(text), self.plane.settings)

        def synced() -> bool:
            nodes = get_json(self.plane.status_url)[1]["nodes"]
            acked: dict[str, set[str]] = {}
            for node in nodes:
                for name, t in node["types"].items():
                    acked.setdefault(name, set()).add(t.get("acked") or "")
            return all(
                acked.get(TYPE_NAMES[t]) == {expected.type_version(t)} for t in (CLUSTER, LISTENER, ROUTE, SIDECAR)
            )

        wait_for(synced, timeout=30, what="Envoy and the sidecar to ACK the edit")

    def stop(self) -> None:
        self.envoy.stop()
        self.sidecar.stop()
        self.plane.stop()
        self.mock.stop()
        self.busy.stop()
        for runtime in self.runtimes.values():
            runtime.stop()


def envoy_for(
    directory: Path, plane: Plane, sidecar_port: int, ads: str = "delta", env: dict[str, str] | None = None
) -> Envoy:
    admin = free_port()
    settings = Settings(
        xds=Address("127.0.0.1", plane.port),
        sidecar=Address("127.0.0.1", sidecar_port),
        admin=Address("127.0.0.1", admin),
        ads=ads,
    )  # type: ignore[arg-type]
    boot = directory / "bootstrap.yaml"
    boot.write_text(to_yaml(to_dict(bootstrap(settings))))
    return Envoy(boot, admin, directory / "envoy.log", env=env)


__all__ = [
    "Mock",
    "Plane",
    "Runtime",
    "SidecarProc",
    "World",
    "capped_checkpoint",
    "envoy_for",
    "get_json",
    "get_text",
    "metric",
]
