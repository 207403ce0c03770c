"""State once against the reference path: time ratio and max |dp| on a random hybrid checkpoint.

For 1, 4, 16 and 64 questions on states of 256, 2K and 8K tokens, one request each: the
engine (state computed once per request, questions as rows from copies of it; no cross-request
cache) against the reference path (each question one whole forward, dense mask, no cache).
Prints figures and ratios; it never fails on time. DESIGN.md section 7's target: the
16-question 2K-token request costs <= 1/4 of the reference.

    .venv/bin/python bench/runtime_state_once.py [--preset hybrid-prefix-bidir] [--device cpu]
        [--hidden 64 --layers 4] [--states 256,2048,8192] [--questions 1,4,16,64]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import torch

from sr_runtime.engine import Engine
from sr_runtime.presets import CORPUS, create
from sr_runtime.types import ChoiceQuestion, DecisionRequest, NoulQuestion, ScoreQuestion


def state_text(engine: Engine, tokens: int, seed: int) -> str:
    """Shuffled corpus words until the state block holds about `tokens` tokens."""
    rng = random.Random(seed)
    words = CORPUS.split()
    text: list[str] = []
    while True:
        text.extend(rng.sample(words, 40))
        block = engine.layout.state_block(" ".join(text))
        n = len(engine.checkpoint.tokenizer.encode(block).ids)
        if n >= tokens:
            return " ".join(text)


def questions(n: int) -> tuple:
    kinds = [
        lambda i: NoulQuestion(f"Does message {i} report a problem that blocks the user's work?"),
        lambda i: ChoiceQuestion(
            (("billing", "Payments, invoices and refunds"), ("engineering", "Outages, errors and bugs"), ("other", None)),
            f"Which team should handle request {i}?",
        ),
        lambda i: ScoreQuestion(("calm", "annoyed", "angry", "furious"), f"How angry is customer {i}?"),
    ]
    return tuple(kinds[i % 3](i) for i in range(n))


def probs(answer) -> list[float]:  # type: ignore[no-untyped-def]
    if hasattr(answer, "noul"):
        return [1 - answer.noul, answer.noul]
    if hasattr(answer, "choice"):
        return [p for _, p in answer.probabilities]
    return list(answer.probabilities)


def timed(engine: Engine, request: DecisionRequest, repeats: int) -> tuple[float, float, object]:
    """The fastest of `repeats` runs, wall and CPU seconds: the cores are shared, so the minimum
    is the figure least disturbed by other processes (CPU time is steadier still on CPU)."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        if engine.backbone.device.type == "cuda":
            torch.cuda.synchronize()
        wall, cpu = time.perf_counter(), time.process_time()
        result = engine.answer(request)
        if engine.backbone.device.type == "cuda":
            torch.cuda.synchronize()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="hybrid-prefix-bidir")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--states", default="256,2048,8192")
    parser.add_argument("--questions", default="1,4,16,64")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = create(Path(tmp) / args.preset, args.preset, seed=0, hidden=args.hidden, layers=args.layers)
        # max_model_len: the checkpoint's own max_length, so the 8K states are allowed.
        options = dict(device=args.device, max_model_len=32768, state_cache_bytes=0)
        engine = Engine.load(path, **options)
        reference = Engine.load(path, reference=True, **options)
        config = engine.backbone.config
        print(
            f"# {args.preset}: hidden {config.hidden_size}, layers {list(engine.backbone.kinds)}, "
            f"{args.device}, torch threads {torch.get_num_threads()}, token budget {engine.token_budget}"
        )
        warm = DecisionRequest("warm up", questions(2))
        engine.answer(warm), reference.answer(warm)
        print(
            f"{'state':>6} {'questions':>9} {'state once s':>13} {'reference s':>12} {'ratio':>7} "
            f"{'speed-up':>9} {'cpu ratio':>9} {'max |dp|':>10}"
        )
        for size in (int(s) for s in args.states.split(",")):
            state = state_text(engine, size, seed=size)
            for n in (int(q) for q in args.questions.split(",")):
                request = DecisionRequest(state, questions(n))
                repeats = 3 if size * n <= 2048 * 16 else 1
                fast, fast_cpu, a = timed(engine, request, repeats)
                slow, slow_cpu, b = timed(reference, request, repeats)
                dp = max(abs(x - y) for p, q in zip(a.answers, b.answers) for x, y in zip(probs(p), probs(q)))  # type: ignore[attr-defined]
                print(
                    f"{size:>6} {n:>9} {fast:>13.3f} {slow:>12.3f} {fast / slow:>7.3f} {slow / fast:>8.1f}x "
                    f"{fast_cpu / slow_cpu:>9.3f} {dp:>10.2e}"
                )
                if size == 2048 and n == 16:
                    verdict = "meets" if slow / fast >= 4 else "MISSES"
                    print(f"# 16 questions on a 2K state: {slow / fast:.1f}x faster than the reference ({verdict} the 4x target)")


if __name__ == "__main__":
    main()
