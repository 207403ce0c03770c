"""`vllm-srun serve --workers N`: N processes on one port, answering as one server does."""

from __future__ import annotations

import shutil
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from sr_runtime.engine import Engine
from sr_runtime.types import DecisionRequest, NoulQuestion

from .conftest import VLLM_SRUN, vllm_srun_serve

STATES = [f"Ticket {i}: the export button fails with a 500 since the update." for i in range(8)]


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def metric(text: str, line_start: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start))


@pytest.mark.slow
def test_two_workers_answer_as_one_server_and_their_metrics_add_up(checkpoint: Path) -> None:
    engine = Engine.load(checkpoint)
    alone = {s: engine.answer(DecisionRequest(s, (NoulQuestion("Is it urgent?"),))).answers[0].noul for s in STATES}  # type: ignore[union-attr]
    with vllm_srun_serve(str(checkpoint), "--workers", "2") as served:
        workers = [p for p in children(served.proc.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]

        def ask(state: str) -> tuple[int, float]:
            # A connection each, so that both workers' accepts see requests.
            r = httpx.post(
                served.url + "/v1/systemone",
                json={"state": state, "questions": {"u": {"type": "noul", "instructions": "Is it urgent?"}}},
                timeout=60,
            )
            return r.status_code, r.json()["answers"]["u"]["noul"] if r.status_code == 200 else r.text

        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(ask, STATES * 4))
        scraped = httpx.get(served.url + "/metrics").text
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(30) == 0
    assert len(workers) == 2
    assert [status for status, _ in got] == [200] * len(got)
    assert [noul for _, noul in got] == pytest.approx([alone[s] for s in STATES * 4], abs=1e-5)
    # Any worker's /metrics is the sum of both: every request counted once.
    assert metric(scraped, 'vsr_runtime_requests_total{endpoint="/v1/systemone",status="200"}') == len(got)
    assert metric(scraped, "vsr_runtime_pass_requests_count") >= 1
    assert (
        1 <= metric(scraped, "vsr_runtime_state_cache_misses_total") <= 2 * len(STATES)
    )  # a state once per worker at most
    assert all(not Path(f"/proc/{p}").exists() or "zombie" in Path(f"/proc/{p}/status").read_text() for p in workers)


@pytest.mark.slow
def test_a_worker_whose_model_fails_to_load_stops_the_server_with_exit_2(checkpoint: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(checkpoint, tmp_path / "torn"))
    (folder / "model.safetensors").write_bytes(b"not safetensors")
    done = subprocess.run(
        [VLLM_SRUN, "serve", str(folder), "--port", "0", "--workers", "2"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(f"cannot load {folder}: SafetensorError: ")
    assert "Traceback" not in done.stderr
