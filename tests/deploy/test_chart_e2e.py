"""The chart's processes, started here as its pods start them, serve requests through a real Envoy.

The chart is rendered with values that put every port on loopback; the control plane and the
sidecar are run with the exact command lines of their rendered containers (only the ConfigMap's
mount path points at a folder laid out as the kubelet lays out a ConfigMap volume: the file
behind a ``..data`` symlink that an update swaps), and Envoy with the rendered bootstrap. An
upgrade that changes the config is a new ConfigMap, arriving as that symlink swap.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sr_control.compiler import Address, Settings, bootstrap
from sr_control.compiler.convert import parse
from sr_control.compiler.protos import Bootstrap, to_dict
from sr_control.compiler.settings import XdsTls
from tests.deploy.chart import RELEASE, config_text, container, find, objects, render
from tests.e2e.envoy_proc import Envoy, free_port, wait_for
from tests.e2e.http_client import request
from tests.e2e.upstreams import Upstream
from tests.extproc.harness import BIN, Mock, get_status

pytestmark = [pytest.mark.envoy, pytest.mark.slow]
MOUNT = "/etc/vllm-sr"
SOCKETS = "/var/run/vllm-sr"  # the emptyDir Envoy and its sidecar share (the sidecar's Unix socket)
ASK = json.dumps(
    {
        "model": "jev-1.13.0",
        "state": "The export button fails with a 500.",
        "questions": {"urgent": {"type": "noul", "instructions": "Is it urgent?"}},
    }
).encode()


class ConfigMapVolume:
    """A folder as the kubelet writes a ConfigMap volume: ``config.yaml -> ..data/config.yaml``,
    ``..data -> ..<timestamp>``; an update writes a new timestamped folder and swaps ``..data``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        self._n = 0

    def write(self, files: dict[str, str]) -> None:
        self._n += 1
        version = self.root / f"..2026_12_01_00_00_0{self._n}.{os.getpid()}"
        version.mkdir()
        for name, text in files.items():
            (version / name).write_text(text)
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(version.name)
        os.replace(tmp, self.root / "..data")  # the atomic swap


def chart_command(deployment: dict[str, Any], name: str, mount: Path) -> list[str]:
    """The container's command line, its executable from this venv, MOUNT at ``mount`` and the
    shared socket volume at ``mount``'s sibling ``run`` (one per test run, as one per pod)."""
    c = container(deployment, name)
    argv = [*c["command"], *c.get("args", [])]
    return [
        str(BIN / argv[0]),
        *(a.replace(MOUNT, str(mount)).replace(SOCKETS, str(mount.parent / "run")) for a in argv[1:]),
    ]


def values(
    ports: dict[str, int], mock: Mock, llm: Upstream, *, chat: bool = False, members: tuple[str, ...] = ("mock",)
) -> dict[str, Any]:
    apis: dict[str, Any] = {"systemone": {"models": ["jev-1.13.0"], "max_deadline_ms": 5000}}
    if chat:
        apis["chat_completions"] = {"models": ["chat"]}
    return {
        "runtimes": {"runtime": None},
        "config": {
            "version": 2,
            "providers": {"models": [{"name": "chat", "endpoints": [f"{llm.url}/v1"]}]},
            "deployments": {
                "mock": {
                    "provider": "systemone",
                    "endpoint": f"{mock.url}/v1/systemone",
                    "model": "jev-1.13.0",
                    "schema": "systemone/0.2",
                    "capabilities": {"question_types": ["noul", "choice"]},
                }
            },
            "pools": {"vllm-sr/auto": {"members": list(members)}},
            "listeners": [{"name": "public", "address": "127.0.0.1", "port": ports["listener"], "apis": apis}],
        },
        "controlPlane": {"adsPort": ports["ads"], "statusPort": ports["status"]},
        "sidecar": {"port": ports["sidecar"], "statusPort": ports["sidecar_status"]},
        "envoy": {
            "adminPort": ports["admin"],
            "statsPort": ports.get("stats") or free_port(),
            "xdsAddress": f"127.0.0.1:{ports['ads']}",
        },
        "logFormat": "console",
    }


class Proc:
    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(argv, stdout=log.open("ab"), stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        assert self.proc.poll() is None, f"{self.proc.args[:3]} exited: {self.log.read_text()[-2000:]}"
        return True

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("chart")
    ports = {k: free_port() for k in ("listener", "ads", "status", "sidecar", "sidecar_status", "admin")}
    mock, llm = Mock(), Upstream("llm")
    started: list[Any] = [mock, llm]
    try:
        objs = objects(render(values(ports, mock, llm)))
        volume = ConfigMapVolume(directory / "config")
        volume.write({"config.yaml": config_text(objs)})
        (directory / "envoy").mkdir()
        boot = directory / "envoy" / "bootstrap.yaml"
        boot.write_text(find(objs, "ConfigMap", f"{RELEASE}-vllm-sr-envoy")["data"]["bootstrap.yaml"])
        plane = Proc(
            chart_command(find(objs, "Deployment", f"{RELEASE}-vllm-sr-control-plane"), "control-plane", volume.root),
            directory / "plane.log",
        )
        started.append(plane)
        wait_for(
            lambda: plane.alive() and get_status(f"http://127.0.0.1:{ports['status']}/healthz", timeout=1) == 200,
            timeout=60,
            what="the control plane to serve",
        )
        sidecar = Proc(
            chart_command(find(objs, "Deployment", f"{RELEASE}-vllm-sr-envoy"), "sidecar", volume.root),
            directory / "sidecar.log",
        )
        started.append(sidecar)
        wait_for(
            lambda: (
                sidecar.alive() and get_status(f"http://127.0.0.1:{ports['sidecar_status']}/healthz", timeout=1) == 200
            ),
            timeout=60,
            what="the sidecar",
        )
        envoy = Envoy(boot, ports["admin"], directory / "envoy.log")
        started.append(envoy)
        yield {
            "ports": ports,
            "objs": objs,
            "volume": volume,
            "mock": mock,
            "llm": llm,
            "plane": plane,
            "directory": directory,
        }
    finally:
        for part in reversed(started):
            part.stop()


def without_stats_listener(text: str) -> dict[str, Any]:
    """The chart's bootstrap less what only the chart adds: the stats listener and its admin cluster."""
    doc = yaml.safe_load(text)
    static = doc["static_resources"]
    assert [listener["name"] for listener in static.pop("listeners")] == ["vsr/stats"]
    assert static["clusters"][0]["name"] == "vsr/admin"
    static["clusters"] = static["clusters"][1:]
    return doc


def test_the_charts_bootstrap_is_the_compilers(stack: dict[str, Any]) -> None:
    ports = stack["ports"]
    chart = find(stack["objs"], "ConfigMap", f"{RELEASE}-vllm-sr-envoy")["data"]["bootstrap.yaml"]
    compiled = bootstrap(
        Settings(xds=Address("127.0.0.1", ports["ads"]), admin=Address("127.0.0.1", ports["admin"]), ads="delta")
    )
    assert to_dict(parse(without_stats_listener(chart), Bootstrap, "chart")) == to_dict(compiled)
    # With default values Envoy finds the control plane by its Service's DNS name.
    default = find(objects(render()), "ConfigMap", f"{RELEASE}-vllm-sr-envoy")["data"]["bootstrap.yaml"]
    compiled = bootstrap(Settings(xds=Address(f"{RELEASE}-vllm-sr-control-plane.ml.svc", 18000), ads="delta"))
    assert to_dict(parse(without_stats_listener(default), Bootstrap, "chart")) == to_dict(compiled)


def test_with_mtls_the_charts_bootstrap_is_the_compilers_with_the_pods_certificate() -> None:
    values = {"controlPlane": {"tls": {"enabled": True, "secretName": "s", "clientSecretName": "c"}}}
    chart = find(objects(render(values)), "ConfigMap", f"{RELEASE}-vllm-sr-envoy")["data"]["bootstrap.yaml"]
    tls = XdsTls(cert="/etc/vllm-sr-tls/tls.crt", key="/etc/vllm-sr-tls/tls.key", ca="/etc/vllm-sr-tls/ca.crt")
    compiled = bootstrap(
        Settings(xds=Address(f"{RELEASE}-vllm-sr-control-plane.ml.svc", 18000), ads="delta", xds_tls=tls)
    )
    assert to_dict(parse(without_stats_listener(chart), Bootstrap, "chart")) == to_dict(compiled)


def test_a_request_goes_end_to_end_and_an_upgrade_goes_live(stack: dict[str, Any]) -> None:
    port = stack["ports"]["listener"]
    wait_for(
        lambda: request(port, "POST", "/v1/systemone", ASK, {"content-type": "application/json"}).status == 200,
        timeout=20,
        what="a System One answer",
    )
    reply = request(port, "POST", "/v1/systemone", ASK, {"content-type": "application/json"})
    assert reply.status == 200 and "urgent" in reply.json()["answers"]
    assert stack["mock"].bodies, "the member was not called"
    chat = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}).encode()
    assert (
        request(port, "POST", "/v1/chat/completions", chat, {"content-type": "application/json"}).status == 404
    )  # not offered yet

    # helm upgrade with chat_completions on the listener: a new ConfigMap, a symlink swap, no restart.
    upgraded = objects(render(values(stack["ports"], stack["mock"], stack["llm"], chat=True)))
    stack["volume"].write({"config.yaml": config_text(upgraded)})
    reply = wait_for(
        lambda: (
            (r := request(port, "POST", "/v1/chat/completions", chat, {"content-type": "application/json"})).status
            == 200
            and r
        ),
        timeout=20,
        what="the upgrade to go live",
    )
    assert reply.json()["upstream"] == "llm"
    assert stack["plane"].proc.poll() is None


def test_a_dangling_pool_member_keeps_the_control_plane_unready_naming_the_line(stack: dict[str, Any]) -> None:
    ports = dict(stack["ports"], ads=free_port(), status=free_port())
    objs = objects(
        render(values(ports, stack["mock"], stack["llm"], members=("mock", "ghost")))
    )  # the values schema lets it through
    volume = ConfigMapVolume(stack["directory"] / "dangling")
    text = config_text(objs)
    volume.write({"config.yaml": text})
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "ghost" in row)
    plane = Proc(
        chart_command(find(objs, "Deployment", f"{RELEASE}-vllm-sr-control-plane"), "control-plane", volume.root),
        stack["directory"] / "dangling.log",
    )
    try:
        # Up (its status port answers) and unready: the readiness probe's view.
        wait_for(
            lambda: plane.alive() and get_status(f"http://127.0.0.1:{ports['status']}/healthz", timeout=1) == 503,
            timeout=60,
            what="the control plane's status port",
        )
        log = plane.log.read_text()
        assert f"line={line}" in log and "unknown deployment 'ghost'" in log, log[-2000:]
        assert "field='pools[\"vllm-sr/auto\"].members[1]'" in log
    finally:
        plane.stop()
