"""Accuracy of the built-in models on bench/data/labelled.jsonl, beside the majority-class baseline.

Each example is one request with one question. The decision read from an answer is the one
seed 001 uses: noul >= 0.5, a choice's top option, a score's most likely level. Baselines: noul,
the overall majority class; choice and score, the majority label of each question (labels only
mean something within their question). Also prints load time, time per request, the answers to
seed 002's examples, and (for `default`) the fit of its constants with 5-fold cross-validation.

    .venv/bin/python bench/builtin_accuracy.py [--models default,smollm2-135m] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from sr_runtime.loader import load_engine
from sr_runtime.request import read_request

DATA = Path(__file__).with_name("data") / "labelled.jsonl"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "requests"


def examples() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def body(example: dict[str, Any]) -> dict[str, Any]:
    question = {k: example[k] for k in ("type", "instructions", "criteria") if k in example}
    return {"state": example["state"], "questions": {"q": question}}


def decision(answer: Any) -> Any:
    if answer.type == "noul":
        return answer.noul >= 0.5
    if answer.type == "choice":
        return answer.choice
    return max(range(len(answer.probabilities)), key=lambda i: answer.probabilities[i])


def baselines(rows: list[dict[str, Any]]) -> dict[str, float]:
    out = {}
    noul = [r["label"] for r in rows if r["type"] == "noul"]
    out["noul"] = Counter(noul).most_common(1)[0][1] / len(noul)
    for kind in ("choice", "score"):
        groups: dict[str, list[Any]] = defaultdict(list)
        for r in rows:
            if r["type"] == kind:
                groups[json.dumps([r.get("instructions"), r.get("criteria")])].append(r["label"])
        total = sum(len(g) for g in groups.values())
        out[kind] = sum(Counter(g).most_common(1)[0][1] for g in groups.values()) / total
    return out


def evaluate(name: str, device: str, rows: list[dict[str, Any]], base: dict[str, float]) -> None:
    start = time.perf_counter()
    engine = load_engine(name, device=device)
    load = time.perf_counter() - start
    right: Counter[str] = Counter()
    count: Counter[str] = Counter()
    start = time.perf_counter()
    for row in rows:
        answer = engine.answer_batch([read_request(body(row)).request])[0].answers[0]
        count[row["type"]] += 1
        right[row["type"]] += decision(answer) == row["label"]
    per_request = (time.perf_counter() - start) / len(rows)
    print(f"\n## {name}: load {load:.1f} s, {per_request * 1000:.0f} ms per one-question request ({device})\n")
    print("| type | examples | accuracy | majority baseline |")
    print("|---|---|---|---|")
    for kind in ("noul", "choice", "score"):
        print(f"| {kind} | {count[kind]} | {right[kind] / count[kind]:.0%} | {base[kind]:.0%} |")
    for label, file in (("seed 002 curl example", "seed-002-curl.json"), ("seed 002 request", "seed-002-request.json")):
        parsed = read_request(json.loads((EXAMPLES / file).read_text()))
        start = time.perf_counter()
        result = engine.answer_batch([parsed.request])[0]
        took = time.perf_counter() - start
        answers = parsed.response(engine.name, result)["answers"]
        print(f"\n{label} ({took * 1000:.0f} ms): `{json.dumps(answers, ensure_ascii=False)}`")


def fit_default(rows: list[dict[str, Any]]) -> None:
    """The relevance threshold for noul (5-fold CV) and the softmax temperature (log-loss)."""
    from sr_runtime.builtins.embedding import CHOICE_TEMPERATURE, NOUL_THRESHOLD, EmbeddingEngine
    from sr_runtime.types import render_text

    engine = load_engine("default")
    assert isinstance(engine, EmbeddingEngine)

    def cos(a: str, b: str) -> float:
        return float(engine.embed(a)[0] @ engine.embed(b)[0])

    noul = [r for r in rows if r["type"] == "noul"]
    feats = [
        (cos(render_text(r["state"]), (r["instructions"] + " " + (r.get("criteria") or {}).get("true", "")).strip()), r["label"])
        for r in noul
    ]

    def best(train: list[tuple[float, bool]]) -> float:
        return max(sorted({x for x, _ in train}), key=lambda t: sum((x >= t) == y for x, y in train))

    folds = 5
    held = sum((x >= best([f for j, f in enumerate(feats) if j % folds != i])) == y for i in range(folds) for j, (x, y) in enumerate(feats) if j % folds == i)
    print(f"\n## default: fitted constants\n\nnoul threshold fitted on all {len(feats)}: {best(feats):.3f} (in code: {NOUL_THRESHOLD}); "
          f"5-fold cross-validated accuracy of the relevance reading: {held / len(feats):.0%}")

    def loss(t: float) -> float:
        total = 0.0
        for r in rows:
            if r["type"] not in ("choice", "score"):
                continue
            parsed = read_request(body(r)).request.questions[0]
            lead = r["instructions"] + " "
            if r["type"] == "choice":
                texts = [lead + (k if v is None else f"{k}: {v}") for k, v in parsed.options]  # type: ignore[union-attr]
                keys: list[Any] = [k for k, _ in parsed.options]  # type: ignore[union-attr]
            else:
                texts = [lead + level for level in r["criteria"]]
                keys = list(range(len(texts)))
            logits = [cos(render_text(r["state"]), t_) / t for t_ in texts]
            top = max(logits)
            log_z = top + math.log(sum(math.exp(x - top) for x in logits))
            total -= logits[keys.index(r["label"])] - log_z
        return total

    grid = [0.01, 0.02, 0.03, 0.05, 0.08, 0.1, 0.2]
    print("choice/score log-loss by softmax temperature: " + ", ".join(f"{t}: {loss(t):.1f}" for t in grid)
          + f" (in code: {CHOICE_TEMPERATURE})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="default,smollm2-135m")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    rows = examples()
    base = baselines(rows)
    print(f"# {DATA.name}: {dict(Counter(r['type'] for r in rows))}")
    for name in args.models.split(","):
        evaluate(name, args.device, rows, base)
    if "default" in args.models.split(","):
        fit_default(rows)


if __name__ == "__main__":
    main()
