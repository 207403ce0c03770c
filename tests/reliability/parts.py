"""What the reliability scenarios are made of, beyond tests/extproc/harness.py's real parts.

PlaneProc   ``vllm-sr xds serve`` as a process on fixed ports, so it can be killed and
            started again where Envoy and the sidecar look for it
Stack       a runtime, a control plane, ``vllm-sr extproc serve`` and Envoy on one config
Traffic     clients sending System One requests one after another until stopped; every
            answer is kept: sent, failed, the longest wait
peak_rss    a process's high-water mark of resident memory (Linux ``VmHWM``)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sr_control.compiler import Address, Settings, compile
from sr_control.compiler.protos import CLUSTER, LISTENER, ROUTE, SIDECAR, TYPE_NAMES
from sr_control.config.load import load_text
from tests.e2e.envoy_proc import Envoy, free_port, wait_for
from tests.e2e.http_client import request
from tests.extproc.harness import VLLM_SR, Plane, Runtime, SidecarProc, envoy_for, get_json, get_status

STATE = "Our export button fails with a 500 since this morning. Open a ticket."
NOUL = {"type": "noul", "instructions": "Does the user report a problem that blocks their work?"}
ASK = {"model": "vllm-sr/auto", "state": STATE, "questions": {"urgent": NOUL}}


def config_text(listeners: dict[str, int], runtime: str, *, spare: bool = False) -> str:
    """One runtime behind ``vllm-sr/auto`` on listener ``public``; ``spare`` adds what an edit
    made while the control plane is down adds: a second deployment (a new cluster), a pool ``ha``
    on ``public`` (new sidecar data for a listener in use) and a listener ``late`` (new port)."""
    text = f"""version: 2
deployments:
  full: {{provider: systemone, endpoint: "{runtime}/v1/systemone", model: tiny, schema: vllm-sr/5.0}}
"""
    if spare:
        text += f"""  spare:
    {{provider: systemone, endpoint: "{runtime}/v1/systemone", model: tiny, schema: vllm-sr/5.0}}
"""
    text += """pools:
  vllm-sr/auto: {members: [full]}
"""
    if spare:
        text += """  ha: {members: [spare, full]}
"""
    models = "[vllm-sr/auto, tiny, ha]" if spare else "[vllm-sr/auto, tiny]"
    text += f"""listeners:
  - name: public
    address: 127.0.0.1
    port: {listeners["public"]}
    apis:
      systemone: {{models: {models}, max_deadline_ms: 20000}}
"""
    if spare:
        text += f"""  - name: late
    address: 127.0.0.1
    port: {listeners["late"]}
    apis:
      systemone: {{models: [ha], max_deadline_ms: 20000}}
"""
    return text


def peak_rss(pid: int) -> int:
    """The most resident memory the process has held, in bytes (Linux ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise LookupError(f"no VmHWM for pid {pid}")


def expected_versions(text: str, settings: Settings) -> dict[str, str]:
    """Type name -> the version a control plane serves for this config text."""
    resources = compile(load_text(text), settings)
    return {TYPE_NAMES[t]: resources.type_version(t) for t in (CLUSTER, LISTENER, ROUTE, SIDECAR)}


def synced(status: dict[str, Any], expected: dict[str, str], nodes: int = 2) -> bool:
    """Every one of ``nodes`` connected nodes (Envoy, the sidecar) ACKed ``expected`` for each
    type it holds, and every type is held by someone."""
    if len(status.get("nodes", [])) < nodes:
        return False
    acked: dict[str, set[str]] = {}
    for node in status["nodes"]:
        for name, t in node["types"].items():
            acked.setdefault(name, set()).add(t.get("acked") or "")
    return all(acked.get(name) == {version} for name, version in expected.items())


# ---------------------------------------------------------------------------- the control plane, as a process


class PlaneProc:
    """``vllm-sr xds serve`` on ``config``: killed with SIGKILL and started again on the same ports."""

    def __init__(self, directory: Path, config: Path, sidecar_port: int, extra: Sequence[str] = ()) -> None:
        self.config = config
        self.port, self.status_port = free_port(), free_port()
        self.sidecar_port = sidecar_port
        self.settings = Settings(sidecar=Address("127.0.0.1", sidecar_port))
        self.log = directory / "xds.log"
        self.status_address = f"127.0.0.1:{self.status_port}"
        self.status_url = f"http://{self.status_address}/status"
        self.extra = tuple(extra)  # more `xds serve` options
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PlaneProc:
        cmd = [
            VLLM_SR,
            "xds",
            "serve",
            "--config",
            str(self.config),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--status-port",
            str(self.status_port),
            "--sidecar",
            f"127.0.0.1:{self.sidecar_port}",
            "--poll-interval",
            "0.01",
            *self.extra,
        ]
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        return self

    def wait(self, timeout: float = 60) -> PlaneProc:
        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, (
                f"vllm-sr xds serve exited: {self.log.read_text()[-2000:]}"
            )
            return get_status(f"http://127.0.0.1:{self.status_port}/healthz", timeout=1) == 200

        wait_for(ready, timeout=timeout, interval=0.02, what="vllm-sr xds serve to serve")
        return self

    def status(self) -> dict[str, Any]:
        return get_json(self.status_url)[1]  # type: ignore[no-any-return]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Stack:
    """Envoy and the sidecar fed by one control plane (a process or in this process), in front of a runtime."""

    directory: Path
    listeners: dict[str, int]
    runtime: Runtime
    plane: PlaneProc | Plane
    sidecar: SidecarProc
    envoy: Envoy

    @property
    def config(self) -> Path:
        return self.plane.config

    def text(self, **changes: Any) -> str:
        return config_text(self.listeners, self.runtime.url, **changes)

    def status(self) -> dict[str, Any]:
        return get_json(self.plane.status_url)[1]  # type: ignore[no-any-return]

    def wait_synced(self, text: str, timeout: float = 30) -> None:
        expected = expected_versions(text, self.plane.settings)
        wait_for(
            lambda: synced(self.status(), expected),
            timeout=timeout,
            interval=0.02,
            what="Envoy and the sidecar to ACK the config",
        )

    def stop(self) -> None:
        self.envoy.stop()
        self.sidecar.stop()
        self.plane.stop()


@contextmanager
def stack(directory: Path, runtime: Runtime, *, ads: str = "delta", in_process: bool = False) -> Iterator[Stack]:
    """A stack on ``config_text``, once Envoy and the sidecar hold its config; stopped afterwards."""
    directory.mkdir(parents=True, exist_ok=True)
    listeners = {"public": free_port(), "late": free_port()}
    sidecar_port = free_port()
    text = config_text(listeners, runtime.url)
    plane: PlaneProc | Plane
    if in_process:
        plane = Plane(directory, text, sidecar_port)
    else:
        config = directory / "config.yaml"
        config.write_text(text)
        plane = PlaneProc(directory, config, sidecar_port).start().wait()
    sidecar = envoy = None
    try:
        sidecar = SidecarProc(directory, plane.port, port=sidecar_port).wait()
        envoy = envoy_for(directory, plane, sidecar_port, ads=ads)  # type: ignore[arg-type]
        s = Stack(directory, listeners, runtime, plane, sidecar, envoy)
        s.wait_synced(text)
        wait_for(lambda: post(listeners["public"], ASK).status == 200, timeout=30, what="the listener to answer")
    except BaseException:
        for part in (envoy, sidecar, plane):
            if part is not None:
                part.stop()
        raise
    try:
        yield s
    finally:
        s.stop()


def write(path: Path, text: str) -> None:
    """Save as editors do: a new file renamed over the old one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def post(port: int, body: Any, path: str = "/v1/systemone", timeout: float = 30) -> Any:
    return request(port, "POST", path, json.dumps(body).encode(), {"content-type": "application/json"}, timeout=timeout)


# ---------------------------------------------------------------------------- traffic


@dataclass(frozen=True)
class Figures:
    """What a scenario's clients saw."""

    sent: int
    failed: int
    longest_wait_s: float

    def __str__(self) -> str:
        return f"sent {self.sent}, failed {self.failed}, longest wait {self.longest_wait_s * 1000:.0f} ms"


@dataclass(frozen=True)
class Answer:
    at: float  # time.monotonic() when it was sent
    wait_s: float
    status: int  # 0: no HTTP answer (the error says why)
    error: str = ""
    body: bytes = b""


@dataclass
class Traffic:
    """``clients`` threads, each sending ``body`` to ``port`` as soon as its last answer came
    (after ``pause`` seconds), until stopped. A request fails unless it is answered 200."""

    port: int
    body: Any = field(default_factory=lambda: ASK)
    clients: int = 2
    pause: float = 0.01
    timeout: float = 30
    answers: list[Answer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(self.clients)]

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 5)

    def _client(self) -> None:
        data = json.dumps(self.body).encode()
        while not self._stop.is_set():
            at = time.monotonic()
            try:
                r = request(
                    self.port, "POST", "/v1/systemone", data, {"content-type": "application/json"}, timeout=self.timeout
                )
                self.answers.append(Answer(at, time.monotonic() - at, r.status, body=r.body[:500]))
            except OSError as exc:
                self.answers.append(Answer(at, time.monotonic() - at, 0, f"{type(exc).__name__}: {exc}"))
            self._stop.wait(self.pause)

    def since(self, at: float) -> list[Answer]:
        return [a for a in self.answers if a.at >= at]

    @property
    def failures(self) -> list[Answer]:
        return [a for a in self.answers if a.status != 200]

    def figures(self) -> Figures:
        answers = list(self.answers)
        return Figures(
            len(answers), sum(a.status != 200 for a in answers), max((a.wait_s for a in answers), default=0.0)
        )


__all__ = [
    "ASK",
    "Answer",
    "Figures",
    "PlaneProc",
    "Stack",
    "Traffic",
    "config_text",
    "expected_versions",
    "peak_rss",
    "post",
    "stack",
    "synced",
    "write",
]
