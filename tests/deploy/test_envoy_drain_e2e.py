"""An Envoy pod stopping as the kubelet stops it, with requests in flight.

The chart's control plane, sidecar and Envoy run here with their rendered command lines (Envoy
with the rendered bootstrap and flags; ``--base-id`` added so that several Envoys on one test
machine do not share hot-restart memory). The upstream is a slow OpenAI-compatible server started
by the test (``tests/e2e/upstreams.Upstream``: it answers after ``x-test-delay-ms``), reached
through the listener's chat_completions API. The pod's stop is played as the kubelet plays it:
both containers' preStop hooks (their rendered commands) at once, and each container's SIGTERM
once its own hook has returned.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sr_control.drain import active_requests
from tests.deploy.chart import RELEASE, config_text, container, find, objects, render
from tests.deploy.test_chart_e2e import ConfigMapVolume, Proc, chart_command, values
from tests.e2e.envoy_proc import free_port, wait_for
from tests.e2e.upstreams import Upstream
from tests.extproc.harness import BIN, Mock, get_status

pytestmark = [pytest.mark.envoy, pytest.mark.slow]
SLOW_MS = 8000
CHAT = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}).encode()


def hook(deployment: dict[str, Any], name: str) -> list[str]:
    """The container's preStop command, its executable from this venv."""
    argv = container(deployment, name)["lifecycle"]["preStop"]["exec"]["command"]
    return [str(BIN / argv[0]), *argv[1:]]


@pytest.fixture()
def pod(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    ports = {k: free_port() for k in ("listener", "ads", "status", "sidecar", "sidecar_status", "admin", "stats")}
    mock, llm = Mock(), Upstream("llm")
    started: list[Any] = [mock, llm]
    try:
        chart_values = values(ports, mock, llm, chat=True)
        # A listener whose System One API allows 10 s, as the chart's default listener does: the
        # preStop then gives requests in flight 12 s.
        chart_values["config"]["listeners"][0]["apis"]["systemone"]["max_deadline_ms"] = 10_000
        # A short announcement (or none), so that the listeners close well inside the requests'
        # 8 s even on a busy test machine, where the hook itself may take seconds to start.
        chart_values["envoy"]["drainSeconds"] = getattr(request, "param", 1)
        objs = objects(render(chart_values))
        deployment = find(objs, "Deployment", f"{RELEASE}-vllm-sr-envoy")
        volume = ConfigMapVolume(tmp_path / "config")
        volume.write({"config.yaml": config_text(objs)})
        plane = Proc(
            chart_command(find(objs, "Deployment", f"{RELEASE}-vllm-sr-control-plane"), "control-plane", volume.root),
            tmp_path / "plane.log",
        )
        started.append(plane)
        wait_for(
            lambda: plane.alive() and get_status(f"http://127.0.0.1:{ports['status']}/healthz", timeout=1) == 200,
            timeout=60,
            what="the control plane to serve",
        )
        sidecar = Proc(chart_command(deployment, "sidecar", volume.root), tmp_path / "sidecar.log")
        started.append(sidecar)
        (tmp_path / "envoy").mkdir()
        (tmp_path / "envoy" / "bootstrap.yaml").write_text(
            find(objs, "ConfigMap", f"{RELEASE}-vllm-sr-envoy")["data"]["bootstrap.yaml"]
        )
        c = container(deployment, "envoy")
        argv = [str(BIN / "envoy"), *(a.replace("/etc/envoy", str(tmp_path / "envoy")) for a in c["args"])]
        envoy = Proc([*argv, "--base-id", str(ports["admin"])], tmp_path / "envoy.log")
        started.append(envoy)
        wait_for(lambda: envoy.alive() and _chat(ports["listener"]).status == 200, timeout=60, what="a chat answer")
        yield {"ports": ports, "deployment": deployment, "envoy": envoy, "sidecar": sidecar}
    finally:
        for part in reversed(started):
            part.stop()


def _chat(port: int, delay_ms: int = 0, conn: http.client.HTTPConnection | None = None) -> http.client.HTTPResponse:
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(
        "POST", "/v1/chat/completions", CHAT, {"content-type": "application/json", "x-test-delay-ms": str(delay_ms)}
    )
    reply = conn.getresponse()
    reply.read()
    return reply


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("pod", [0, 1], ids=["no-announcement", "announced-1s"], indirect=True)
def test_requests_in_flight_finish_while_the_pod_stops(pod: dict[str, Any]) -> None:
    ports, deployment = pod["ports"], pod["deployment"]
    admin = f"127.0.0.1:{ports['admin']}"
    keep_alive = http.client.HTTPConnection("127.0.0.1", ports["listener"], timeout=30)
    assert _chat(ports["listener"], conn=keep_alive).status == 200

    # Requests that take 8 s, each on its own connection, in flight before the pod is told to stop.
    results: list[int | str] = []

    def slow() -> None:
        try:
            results.append(_chat(ports["listener"], SLOW_MS).status)
        except OSError as exc:
            results.append(repr(exc))

    clients = [threading.Thread(target=slow) for _ in range(4)]
    for t in clients:
        t.start()
    wait_for(lambda: active_requests(admin) == 4, timeout=10, what="4 requests in flight")

    # The kubelet: both preStop hooks at once; each container's SIGTERM when its own hook returns.
    envoy_hook = subprocess.Popen(hook(deployment, "envoy"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sidecar_hook = subprocess.Popen(hook(deployment, "sidecar"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    # While the drain announces itself, a connection already open is answered and told to close.
    assert envoy_hook.stdout is not None
    assert envoy_hook.stdout.readline().startswith(b"envoy drain: draining")
    reply = _chat(ports["listener"], conn=keep_alive)
    assert reply.status == 200 and reply.getheader("connection") == "close"

    # Once the announcement is over the listeners are closed: no new connection is accepted,
    # while the 8 s requests are still running.
    assert envoy_hook.stdout.readline().startswith(b"envoy drain: listeners closed")
    wait_for(lambda: not _accepts(ports["listener"]), timeout=2, what="the listener to close")
    assert active_requests(admin) == 4 and results == []

    # The hook returns (exit 0) once they have all finished, well before its timeout.
    assert envoy_hook.wait(30) == 0, envoy_hook.communicate()[0]
    for t in clients:
        t.join(5)
    assert results == [200, 200, 200, 200]
    assert sidecar_hook.poll() is None, "the sidecar stops only after Envoy"

    pod["envoy"].proc.terminate()
    assert pod["envoy"].proc.wait(10) is not None
    assert sidecar_hook.wait(10) == 0, sidecar_hook.communicate()[0]
    pod["sidecar"].proc.terminate()
    assert pod["sidecar"].proc.wait(30) is not None


def test_the_stats_listener_serves_prometheus_and_the_probes_and_nothing_else(pod: dict[str, Any]) -> None:
    stats = pod["ports"]["stats"]
    assert get_status(f"http://127.0.0.1:{stats}/stats/prometheus", timeout=5) == 200
    assert get_status(f"http://127.0.0.1:{stats}/ready", timeout=5) == 200
    assert get_status(f"http://127.0.0.1:{stats}/livez", timeout=5) == 200
    for path in ("/config_dump", "/quitquitquit", "/runtime_modify", "/stats", "/clusters"):
        assert get_status(f"http://127.0.0.1:{stats}{path}", timeout=5) == 404, path
