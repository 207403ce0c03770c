"""The labelled sets that measure the built-in models (bench/data/README.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from sr_runtime.request import read_request

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def question(row: dict) -> str:
    return json.dumps([row["instructions"], row.get("criteria")])


def test_the_parts_are_split_by_question_and_large_enough() -> None:
    dev, held = rows("builtin-dev.jsonl"), rows("builtin-heldout.jsonl")
    assert not {question(r) for r in dev} & {question(r) for r in held}
    total = Counter(r["type"] for r in dev + held)
    assert total["noul"] >= 300 and total["choice"] >= 150 and total["score"] >= 100


def test_every_example_is_a_valid_request_with_a_label_its_question_offers() -> None:
    for row in rows("builtin-dev.jsonl") + rows("builtin-heldout.jsonl"):
        body = {
            "state": row["state"],
            "questions": {"q": {k: row[k] for k in ("type", "instructions", "criteria") if k in row}},
        }
        if "roles" in row:
            body["roles"] = row["roles"]
        (parsed,) = read_request(body).request.questions
        if row["type"] == "noul":
            assert isinstance(row["label"], bool)
        elif row["type"] == "choice":
            assert row["label"] in dict(parsed.options)  # type: ignore[union-attr]
        else:
            assert 0 <= row["label"] < len(parsed.levels)  # type: ignore[union-attr]


def test_the_majority_baseline_is_honest() -> None:
    """Each noul question is half true; each choice option and score level is as frequent as the others."""
    for name in ("builtin-dev.jsonl", "builtin-heldout.jsonl"):
        by_question: dict[str, Counter] = {}
        for row in rows(name):
            by_question.setdefault(question(row), Counter())[json.dumps(row["label"])] += 1
        for counts in by_question.values():
            assert len(counts) > 1 and max(counts.values()) - min(counts.values()) <= 1
