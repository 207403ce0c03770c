"""The product installs as a wheel and works from anywhere, not only from an editable checkout.

A wheel is built from a copy of this working tree (``pip wheel --no-deps --no-build-isolation``)
and installed into a fresh virtual environment that sees ``.venv``'s dependencies but not the
checkout. From a folder outside the checkout, the installed commands migrate a format-1 config,
compile it (``envoy --mode validate`` included), serve it over xDS to a real gRPC client, and
answer a request with the built-in model: each needs data files the package must carry (Envoy
templates, migration steps, System One specs, the default model's settings).
"""

from __future__ import annotations

import json
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import urllib.request
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from envoy.service.discovery.v3 import discovery_pb2

from sr_control.compiler.protos import LISTENER
from tests.xds.xds_support import AdsClient, free_port, wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
FORMAT_1 = """# a format-1 config, as written before listeners had an apis map
providers:
  models:
    - {name: llm, api_format: chat_completions, endpoints: ["http://127.0.0.1:9/v1"]}
listeners:
  - name: public
    address: 127.0.0.1
    port: 18801
    models: [llm]
"""
REQUEST = {
    "state": "The export button fails with a 500.",
    "questions": {"team": {"type": "choice", "criteria": {"billing": "Invoices", "engineering": "Outages and bugs"}}},
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The bin folder of a fresh venv holding only the wheel (dependencies come from .venv)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"
        ),
    )
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(work / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (work / "dist").glob("vllm_sr-*.whl")
    fresh = work / "fresh"
    venv.create(fresh, with_pip=False)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(fresh), "platbase": str(fresh)}))
    # Dependencies from .venv's site-packages, as a plain path: its .pth files (the editable
    # install of this checkout among them) are not run, so only the wheel provides vllm-sr.
    (purelib / "deps-from-dot-venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(fresh / "bin" / "python"),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    yield fresh / "bin"


def run(
    bin_dir: Path, cwd: Path, *args: str, script: str = "vllm-sr", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    # envoy from .venv on PATH, as an operator has it; nothing else of the checkout.
    env = {"PATH": f"{bin_dir}:{VENV_BIN}:/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(
        [str(bin_dir / script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_wheel_carries_the_data_files(installed: Path) -> None:
    (wheel,) = (installed.parents[1] / "dist").glob("vllm_sr-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for expected in (
        "sr_control/envoy_templates/listener.yaml",
        "sr_control/envoy_templates/bootstrap.yaml",
        "sr_control/migrations/0001_listener_apis.py",
        "systemone/spec/systemone-0.2.schema.yaml",
        "systemone/spec/vllm-sr-5.0.extensions.yaml",
        "systemone/spec/vllm-sr-4.0.openapi.yaml",
        "sr_control/defaults/local.yaml",
    ):
        assert expected in names
    assert not [n for n in names if "__pycache__" in n or n.startswith(("tests/", "docs/", "bench/"))]


def test_the_installed_commands_work_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(installed / "python"), "-c", "import sr_control; print(sr_control.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert where.stdout.startswith(str(installed.parent)), f"sr_control comes from {where.stdout!r}, not the wheel"

    config = tmp_path / "router.yaml"
    config.write_text(FORMAT_1)
    migrated = run(installed, tmp_path, "config", "migrate", "--in-place", str(config))
    assert migrated.returncode == 0, migrated.stderr
    assert "version: 2" in config.read_text() and "apis:" in config.read_text()

    compiled = run(installed, tmp_path, "config", "compile", str(config), "-o", str(tmp_path / "out"), "--validate")
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert (tmp_path / "out" / "bootstrap.yaml").exists()

    ads, status = free_port(), free_port()
    plane = subprocess.Popen(
        [
            str(installed / "vllm-sr"),
            "xds",
            "serve",
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(ads),
            "--status-port",
            str(status),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = None
    try:
        wait_for(lambda: _healthy(status), timeout=60, what="the installed control plane to serve")
        client = AdsClient(ads)
        client.send(discovery_pb2.DiscoveryRequest(type_url=LISTENER, node=discovery_pb2.DiscoveryRequest().node))
        response = client.receive(timeout=10)
        assert response.type_url == LISTENER and len(response.resources) == 1
    finally:
        if client is not None:
            client.close()
        plane.send_signal(signal.SIGTERM)
        try:
            plane.wait(30)
        except subprocess.TimeoutExpired:
            plane.kill()
            plane.wait()
            raise AssertionError("the installed control plane did not stop within 30 s of SIGTERM") from None

    request = tmp_path / "request.json"
    request.write_text(json.dumps(REQUEST))
    answered = run(installed, tmp_path, "answer", "default", str(request), script="vllm-srun", timeout=300)
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["answers"]["team"]["choice"] == "engineering"


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False
