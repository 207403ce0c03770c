"""``vllm-sr request`` through a real listener: the seed 002 example answered."""

from __future__ import annotations

import json
import subprocess

import jsonschema
import pytest

from sr_control.operate.request import SUMMARY_SCHEMA
from tests.conftest import BIN, ROOT
from tests.operate.stack import Live

pytestmark = [pytest.mark.envoy, pytest.mark.slow]
SEED_002 = ROOT / "examples" / "requests" / "seed-002-curl.json"


def test_request_answers_the_seed_002_example_through_the_listener(live: Live) -> None:
    url = f"http://127.0.0.1:{live.ports['public']}"
    raw = live.cli("request", "--listener", url, str(SEED_002), "--format", "json")
    assert raw.returncode == 0, raw.stderr
    body = json.loads(raw.stdout)
    assert body["answers"]["urgent"]["type"] == "noul" and 0 <= body["answers"]["urgent"]["noul"] <= 1

    xds = live.plane.status_address
    text = live.cli("request", "--listener", url, str(SEED_002), "--xds", xds)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"200 from {url}/v1/systemone")
    assert "urgent (noul): noul=" in text.stdout
    plane = live.status()
    # The two versions, named apart: the listener's part of the config, and the whole config's.
    assert f"listener version  {plane['listener_versions']['public']}  (x-vsr-config-version" in text.stdout
    assert f"config version    {plane['version']}  (live on the control plane {xds}, listener public)" in text.stdout
    assert "member            full" in text.stdout

    summary = live.cli("request", "--listener", url, str(SEED_002), "--xds", xds, "--format", "summary")
    doc = json.loads(summary.stdout)
    jsonschema.validate(doc, SUMMARY_SCHEMA)
    assert (doc["member"], doc["listener"], doc["live"]) == ("full", "public", True)
    assert (doc["listener_version"], doc["config_version"]) == (plane["listener_versions"]["public"], plane["version"])
    assert doc["answers"]["urgent"]["type"] == "noul" and doc["request_id"]


def test_request_says_when_the_control_plane_cannot_name_the_config_version(live: Live) -> None:
    from tests.e2e.envoy_proc import free_port

    url = f"http://127.0.0.1:{live.ports['public']}"
    done = live.cli("request", "-l", url, str(SEED_002), "--xds", f"127.0.0.1:{free_port()}")
    assert done.returncode == 0, done.stderr
    assert f"listener version  {live.status()['listener_versions']['public']}" in done.stdout
    assert "config version    -  (the control plane 127.0.0.1:" in done.stdout


def test_request_reads_standard_input_and_exits_1_on_a_refused_request(live: Live) -> None:
    url = f"http://127.0.0.1:{live.ports['public']}"
    done = subprocess.run(
        [str(BIN / "vllm-sr"), "request", "-l", url, "-"],
        input=json.dumps({"state": "hi", "questions": {"q": {"type": "nope"}}}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stdout.startswith("422 from"), done.stdout
    assert "request id" in done.stdout and "Input tag 'nope'" in done.stdout


def test_request_exits_2_when_the_listener_does_not_answer(live: Live) -> None:
    from tests.e2e.envoy_proc import free_port

    done = live.cli("request", "-l", f"127.0.0.1:{free_port()}", str(SEED_002))
    assert done.returncode == 2 and "the listener does not answer" in done.stderr
