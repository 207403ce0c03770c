"""bench/fanout.py kept from rotting: its --small run (a few nodes, a few edits) end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("fanout") / "fanout.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fanout.py"), "--small", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "bytes/edit" in done.stdout  # the table
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def test_every_edit_reaches_every_node_and_each_figure_is_there(report: dict[str, Any]) -> None:
    rows = report["rows"]
    assert [r["nodes"] for r in rows] == [10, 30]
    for row in rows:
        assert row["not_in_step"] == []
        assert row["edits"] == 4
        assert set(row["edit_to_all_acked_s"]) == {"p50", "p99", "max"}
        assert set(row["served_to_all_acked_s"]) == {"p50", "p99", "max"}
        assert row["idle_rss_mib"] > 0 and row["push_rss_mib"] > 0
        assert row["idle_cpu"] >= 0 and row["push_cpu"] >= 0


def test_bytes_serialized_per_edit_do_not_grow_with_the_node_count(report: dict[str, Any]) -> None:
    few, many = (r["encoded_bytes_per_edit"] for r in report["rows"])
    assert few > 0
    assert many == few
