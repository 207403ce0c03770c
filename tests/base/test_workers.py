"""The supervisor both servers' ``--workers N`` run under (``sr_base/workers.py``), with real
processes: each test's workers are functions of this module, as a server's are of its own."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from sr_base.workers import METRICS_DIR, Report, Workers


def _report_then_wait(index: int, report: Report, folder: str) -> None:
    """Say where the metrics go, then run until SIGTERM, and leave a mark on the way out."""
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    Path(folder, f"ready-{index}").write_text("")
    report({"index": index, "metrics": os.environ.get(METRICS_DIR)})
    while not stop:
        time.sleep(0.02)
    Path(folder, f"drained-{index}").write_text("")


def _second_one_exits(index: int, report: Report, folder: str) -> None:
    if index == 1:
        # Only once the others can drain: a SIGTERM before their handler is set would kill them.
        while not (Path(folder, "ready-0").exists() and Path(folder, "ready-2").exists()):
            time.sleep(0.02)
        raise SystemExit(3)
    _report_then_wait(index, report, folder)


def _deaf_to_sigterm(index: int, report: Report, folder: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    report({"index": index})
    time.sleep(60)


def _wait_for_reports(workers: Workers) -> list[dict[str, object]]:
    deadline = time.monotonic() + 60
    while not all(workers.reports()):
        assert time.monotonic() < deadline and workers.all_alive(), "a worker never reported"
        time.sleep(0.05)
    return [r for r in workers.reports() if r is not None]


@pytest.mark.slow
def test_workers_report_and_each_drains_on_a_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(METRICS_DIR, raising=False)
    with Workers(2, _report_then_wait, str(tmp_path), name="test", stop_s=30) as workers:
        reports = _wait_for_reports(workers)
        metrics = workers.metrics_dir
        # SIGINT is the supervisor's to act on (Ctrl-C reaches the whole process group).
        os.kill(workers.processes[0].pid or 0, signal.SIGINT)
        workers.stopping.set()
        assert workers.watch() is None
    assert [r["index"] for r in reports] == [0, 1] and all(isinstance(r["at"], float) for r in reports)
    # Every worker shares one metrics folder, the supervisor's own, gone once they are.
    assert [r["metrics"] for r in reports] == [metrics, metrics]
    assert not Path(metrics).exists() and METRICS_DIR not in os.environ
    assert sorted(p.name for p in tmp_path.glob("drained-*")) == ["drained-0", "drained-1"]
    assert workers.exit_codes() == [0, 0]


@pytest.mark.slow
def test_a_worker_that_exits_stops_the_others(tmp_path: Path) -> None:
    with Workers(3, _second_one_exits, str(tmp_path), name="test", stop_s=30) as workers:
        codes = workers.watch()
    assert codes is not None and codes[1] == 3
    assert all(not p.is_alive() for p in workers.processes)
    assert sorted(p.name for p in tmp_path.glob("drained-*")) == ["drained-0", "drained-2"]  # drained, not killed


@pytest.mark.slow
def test_a_worker_deaf_to_sigterm_is_killed_after_stop_s(tmp_path: Path) -> None:
    with Workers(1, _deaf_to_sigterm, str(tmp_path), name="test", stop_s=0.5) as workers:
        _wait_for_reports(workers)
    assert workers.exit_codes() == [-signal.SIGKILL]


@pytest.mark.slow
def test_a_metrics_folder_named_by_the_environment_is_used_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = tmp_path / "metrics"
    given.mkdir()
    monkeypatch.setenv(METRICS_DIR, str(given))
    with Workers(1, _report_then_wait, str(tmp_path), name="test", stop_s=30) as workers:
        reports = _wait_for_reports(workers)
    assert reports[0]["metrics"] == str(given)
    assert given.is_dir() and os.environ[METRICS_DIR] == str(given)
