"""Accuracy of the built-in models on the labelled sets, beside the majority-class baseline.

Each example is one request with one question. The decision read from an answer is the one
seed 001 uses: noul >= 0.5, a choice's top option, a score's most likely level. Baselines: noul,
the majority class of the part; choice and score, the majority label of each question (labels
only mean something within their question). Each accuracy comes with its 95% Wilson interval.

The parts (bench/data/README.md): `dev` (bench/data/builtin-dev.jsonl, the only part any
constant was fitted on), `heldout` (bench/data/builtin-heldout.jsonl, never read by a fit) and
`legacy` (bench/data/labelled.jsonl, the first 131 examples). Also prints load time, time per
request and the answers to seed 002's examples. `--fit` refits `default`'s constants on the
parts they were fitted on: the noul relevance threshold with 5-fold cross-validation and the
choice/score softmax temperature by log-loss on legacy; the NLI noul reader's threshold and
temperature by maximum likelihood on the noul rows of dev and legacy (never heldout).
`VLLM_SR_DEFAULT_NOUL=relevance` measures `default` with noul read as relevance.

Then, for `default`, the noul time a client sees: p50/p99 of one-question requests and the time of
one request with 64 noul questions. `--noul-model PATH` measures (or `--fit`s) a noul model you
bring; its fit prints the vllm-sr-noul.json to put beside it.

    .venv/bin/python bench/builtin_accuracy.py [--models default,smollm2-135m] [--parts dev,heldout]
        [--fit] [--noul-model PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from sr_runtime.builtins.pair_model import CALIBRATION
from sr_runtime.loader import load_engine
from sr_runtime.request import read_request

DATA = Path(__file__).with_name("data")
PARTS = {
    "dev": DATA / "builtin-dev.jsonl",
    "heldout": DATA / "builtin-heldout.jsonl",
    "legacy": DATA / "labelled.jsonl",
}
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "requests"
TYPES = ("noul", "choice", "score")


def examples(part: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in PARTS[part].read_text(encoding="utf-8").splitlines() if line.strip()]


def body(example: dict[str, Any]) -> dict[str, Any]:
    question = {k: example[k] for k in ("type", "instructions", "criteria") if k in example}
    out = {"state": example["state"], "questions": {"q": question}}
    if "roles" in example:
        out["roles"] = example["roles"]
    return out


def decision(answer: Any) -> Any:
    if answer.type == "noul":
        return answer.noul >= 0.5
    if answer.type == "choice":
        return answer.choice
    return max(range(len(answer.probabilities)), key=lambda i: answer.probabilities[i])


def question_key(row: dict[str, Any]) -> str:
    return json.dumps([row.get("instructions"), row.get("criteria")])


def baselines(rows: list[dict[str, Any]]) -> dict[str, float]:
    out = {}
    noul = [r["label"] for r in rows if r["type"] == "noul"]
    out["noul"] = Counter(noul).most_common(1)[0][1] / len(noul)
    for kind in ("choice", "score"):
        groups: dict[str, list[Any]] = defaultdict(list)
        for r in rows:
            if r["type"] == kind:
                groups[question_key(r)].append(r["label"])
        total = sum(len(g) for g in groups.values())
        out[kind] = sum(Counter(g).most_common(1)[0][1] for g in groups.values()) / total
    return out


def wilson(right: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion (sound near 0 and 1, unlike p +- 2 se)."""
    p = right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def evaluate(name: str, device: str, parts: list[str], noul_model: Path | None = None) -> None:
    start = time.perf_counter()
    engine = load_engine(name, device=device, noul_model=noul_model)
    load = time.perf_counter() - start
    print(f"\n## {name}: load {load:.1f} s ({device})\n")
    print("| part | type | examples | accuracy | 95% interval | majority baseline |")
    print("|---|---|---|---|---|---|")
    timed, took = 0, 0.0
    for part in parts:
        rows = examples(part)
        base = baselines(rows)
        right: Counter[str] = Counter()
        count: Counter[str] = Counter()
        for row in rows:
            request = read_request(body(row)).request
            start = time.perf_counter()
            answer = engine.answer_batch([request])[0].answers[0]
            took += time.perf_counter() - start
            timed += 1
            count[row["type"]] += 1
            right[row["type"]] += decision(answer) == row["label"]
        for kind in TYPES:
            low, high = wilson(right[kind], count[kind])
            print(
                f"| {part} | {kind} | {count[kind]} | {right[kind] / count[kind]:.1%} | {low:.0%}-{high:.0%} "
                f"| {base[kind]:.1%} |"
            )
    print(f"\n{took / timed * 1000:.0f} ms per one-question request on average ({timed} requests)")
    for label, file in (("seed 002 curl example", "seed-002-curl.json"), ("seed 002 request", "seed-002-request.json")):
        parsed = read_request(json.loads((EXAMPLES / file).read_text()))
        start = time.perf_counter()
        result = engine.answer_batch([parsed.request])[0]
        answers = parsed.response(engine.name, result)["answers"]
        print(f"\n{label} ({(time.perf_counter() - start) * 1000:.0f} ms): `{json.dumps(answers, ensure_ascii=False)}`")


def fit_default() -> None:
    """`default`'s constants on the part they were fitted on (legacy): noul threshold (5-fold CV), temperature."""
    from sr_runtime.builtins.embedding import CHOICE_TEMPERATURE, NOUL_THRESHOLD, EmbeddingEngine
    from sr_runtime.types import render_text

    rows = examples("legacy")
    engine = load_engine("default")
    assert isinstance(engine, EmbeddingEngine)

    def cos(a: str, b: str) -> float:
        return float(engine.embed(a)[0] @ engine.embed(b)[0])

    noul = [r for r in rows if r["type"] == "noul"]
    feats = [
        (
            cos(render_text(r["state"]), (r["instructions"] + " " + (r.get("criteria") or {}).get("true", "")).strip()),
            r["label"],
        )
        for r in noul
    ]

    def best(train: list[tuple[float, bool]]) -> float:
        return max(sorted({x for x, _ in train}), key=lambda t: sum((x >= t) == y for x, y in train))

    folds = 5
    held = sum(
        (x >= best([f for j, f in enumerate(feats) if j % folds != i])) == y
        for i in range(folds)
        for j, (x, y) in enumerate(feats)
        if j % folds == i
    )
    print(
        "\n## default: fitted constants\n\n"
        f"noul threshold fitted on all {len(feats)}: {best(feats):.3f} (in code: {NOUL_THRESHOLD}); 5-fold "
        f"cross-validated accuracy of the relevance reading: {held / len(feats):.0%}"
    )

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
    print(
        "choice/score log-loss by softmax temperature: "
        + ", ".join(f"{t}: {loss(t):.1f}" for t in grid)
        + f" (in code: {CHOICE_TEMPERATURE})"
    )


def logistic(samples: list[tuple[float, bool]]) -> tuple[float, float]:
    """(threshold, temperature) maximizing the likelihood of P(true) = sigmoid((d - threshold) / temperature)."""
    import numpy as np

    x = np.array([d for d, _ in samples])
    y = np.array([float(label) for _, label in samples])
    w = np.zeros(2)  # z = w0 * d + w1, by Newton's method
    design = np.stack([x, np.ones_like(x)], axis=1)
    for _ in range(50):
        p = 1 / (1 + np.exp(-(design @ w)))
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + 1e-9 * np.eye(2)
        w += np.linalg.solve(hessian, design.T @ (y - p))
    return float(-w[1] / w[0]), float(1 / w[0])


def fit_nli(noul_model: Path | None = None) -> None:
    """The NLI noul reader's calibrations, on the noul rows of dev and legacy only; with
    `noul_model`, that model's, printed as the vllm-sr-noul.json to put beside it."""
    from sr_runtime.builtins import nli
    from sr_runtime.types import NoulQuestion

    reader = nli.NliReader.load(noul_model)
    main: list[tuple[float, bool]] = []
    fallback: list[tuple[float, bool]] = []
    for row in examples("dev") + examples("legacy"):
        if row["type"] != "noul":
            continue
        request = read_request(body(row)).request
        question = request.questions[0]
        assert isinstance(question, NoulQuestion)
        pieces = reader.pieces(nli.state_text(request.state, request.roles))
        readings = reader.readings(question)
        text = row["instructions"]
        # The fallback's fit: every question read as "<question> Yes." against "<question> No.".
        pairs = [(r.statement, r.negation) for r in readings] + [(f"{text} Yes.", f"{text} No.")]
        ds, _ = reader.differences(pieces, pairs)
        main += [(d, row["label"]) for r, d in zip(readings, ds) if not r.fallback]
        fallback.append((ds[-1], row["label"]))
    fitted = {}
    for name, samples, constants, keys in (
        (
            "statement against negation (and criteria)",
            main,
            (reader.fit.threshold, reader.fit.temperature),
            ("threshold", "temperature"),
        ),
        (
            "fallback, <question> Yes. against <question> No.",
            fallback,
            (reader.fit.fallback_threshold, reader.fit.fallback_temperature),
            ("fallback_threshold", "fallback_temperature"),
        ),
    ):
        threshold, temperature = logistic(samples)
        fitted.update(zip(keys, (round(threshold, 3), round(temperature, 3))))
        right = sum((d >= threshold) == label for d, label in samples)
        print(
            f"NLI {name}: threshold {threshold:.3f}, temperature {temperature:.3f} (in use: {constants[0]}, "
            f"{constants[1]}); {right}/{len(samples)} right at the threshold"
        )
    if noul_model is not None:
        print(f"\n{CALIBRATION} beside the model: {json.dumps(fitted)}")


def timing(noul_model: Path | None, runs: int) -> None:
    """`default`'s noul time as a client sees it, through `vllm-srun serve default` on this machine:
    one-question requests (p50, p99) and one request of 64 noul questions on one state."""
    import socket
    import subprocess

    import httpx
    import numpy as np

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(Path(sys.executable).with_name("vllm-srun")), "serve", "default", "--port", str(port)]
    if noul_model is not None:
        command += ["--noul-model", str(noul_model)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=60) as client:
            started = time.monotonic()
            while True:
                try:
                    if client.get(f"{url}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() - started > 300:
                    raise SystemExit("vllm-srun serve default did not come up")
                time.sleep(0.2)
            every = [r for r in examples("heldout") if r["type"] == "noul"]
            rows = every[:runs]
            client.post(f"{url}/v1/systemone", json=body(rows[0])).raise_for_status()  # warm
            took = []
            for row in rows:
                start = time.perf_counter()
                client.post(f"{url}/v1/systemone", json=body(row)).raise_for_status()
                took.append((time.perf_counter() - start) * 1000)
            questions = {f"q{i}": body(row)["questions"]["q"] for i, row in enumerate(every[::2][:64])}
            big = []
            for _ in range(3):
                start = time.perf_counter()
                reply = client.post(f"{url}/v1/systemone", json={"state": rows[0]["state"], "questions": questions})
                reply.raise_for_status()
                big.append(time.perf_counter() - start)
    finally:
        server.terminate()
        server.wait(30)
    p50, p99 = np.percentile(took, [50, 99])
    print(
        "\n"
        f"through vllm-srun serve default: one-question noul request p50 {p50:.0f} ms, p99 {p99:.0f} ms over "
        f"{len(took)} requests (target p50 <= 60 ms)"
    )
    print(f"64 noul questions in one request: {min(big):.2f}-{max(big):.2f} s over {len(big)} runs (target <= 3 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="default,smollm2-135m")
    parser.add_argument("--parts", default="dev,heldout", help="any of dev, heldout, legacy")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--fit", action="store_true", help="refit default's constants on legacy and dev (and evaluate nothing)"
    )
    parser.add_argument("--noul-model", type=Path, help="default's noul reader: an .onnx file or a Hugging Face folder")
    parser.add_argument(
        "--timing",
        type=int,
        default=100,
        metavar="N",
        help="time N one-question noul requests and a 64-question one (0: skip)",
    )
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # rows appear as they are measured
    if args.fit:
        if args.noul_model is None:
            fit_default()
        fit_nli(args.noul_model)
        return
    parts = args.parts.split(",")
    for part in parts:
        print(f"# {PARTS[part].name}: {dict(Counter(r['type'] for r in examples(part)))}")
    for name in args.models.split(","):
        evaluate(name, args.device, parts, args.noul_model if name == "default" else None)
    if args.timing and "default" in args.models.split(","):
        timing(args.noul_model, args.timing)


if __name__ == "__main__":
    main()
