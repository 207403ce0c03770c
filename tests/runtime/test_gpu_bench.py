"""bench/gpu.py, the one-H200 script (docs/runtime/gpu.md), kept from rotting: its --small run on CPU.

The H200 run happens once, on a lent machine; this runs the same code path on tiny shapes in
seconds, so a change to the engine's API or the report breaks here first, not on the GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LATENCY_ROWS = [
    "1 text question",
    "4 text questions",
    "16 text questions",
    "16 questions, JSON state",
    "64 text questions",
    "255-option choice",
    "24K-token state, 4 questions",
    "64K-token state, 2 questions",
    "117K-token state, 2 questions",
]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu.py"), "--device", "cpu", "--small", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads(out.read_text())


def test_every_section_runs_on_cpu_without_an_error(small_run: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    _, report = small_run
    failed = {name: s.get("error") or s.get("reason") for name, s in report["sections"].items() if s["status"] != "ok"}
    assert failed == {}
    assert report["meta"]["finished"] is True
    assert {"1b.load", "1b.throughput", "1b.fp32", "1b.state_once", "27b.load", "27b.throughput"} <= set(
        report["sections"]
    )


def test_seed_001s_latency_rows_are_answered_beside_its_runtime_and_vllm_columns(
    small_run: tuple[subprocess.CompletedProcess[str], dict],
) -> None:
    done, report = small_run
    for row in LATENCY_ROWS:
        result = report["sections"][f"27b.{row}"]["result"]
        assert result["ms"] > 0 and result["questions"] >= 1
        assert result["seed_runtime_ms"] and result["seed_vllm_ms"]
    long = report["sections"]["27b.117K-token state, 2 questions"]["result"]
    # Past the validated length: only the long-context opt-in lets it be answered at all.
    assert long["input_tokens"] > report["meta"]["validated_length"]
    table = done.stdout[done.stdout.rindex("# bench/gpu.py:") :]
    assert "27b 24K-token state, 4 questions" in table and "24,862" in table


def test_throughput_is_compared_with_a_plain_forward_over_the_same_tokens(
    small_run: tuple[subprocess.CompletedProcess[str], dict],
) -> None:
    _, report = small_run
    throughput = report["sections"]["1b.throughput"]["result"]
    assert set(throughput) >= {"1", "8", "32"}
    for n in ("1", "8", "32"):
        assert throughput[n]["plain_forward_ms"] > 0
        assert throughput[n]["tokens_per_request"] > report["sections"]["1b.throughput"]["result"]["state_tokens"]


def test_the_fp32_check_compares_the_same_weights_question_by_question(
    small_run: tuple[subprocess.CompletedProcess[str], dict],
) -> None:
    _, report = small_run
    check = report["sections"]["1b.fp32"]["result"]
    assert check["weights_match"] is True
    assert check["questions"] >= 40
    # fp32 state once equals the fp32 reference path (DESIGN.md section 7): the check's own floor.
    assert check["fp32_state_once_vs_reference_max_dp"] <= 1e-4
    assert 0 <= check["max_dp"] <= 1
