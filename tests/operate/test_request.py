"""``vllm-sr request`` through a real listener: the seed 002 example answered."""

from __future__ import annotations

import json
import subprocess

import pytest

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

    text = live.cli("request", "--listener", url, str(SEED_002))
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"200 from {url}/v1/systemone")
    assert "urgent (noul): noul=" in text.stdout
    version = live.status()["listener_versions"]["public"]
    assert f"config version  {version}" in text.stdout


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
