"""Requests per second for the codec's per-request work on a 16-question request, on one core.

    .venv/bin/python bench/codec.py [--seconds 2]

Prints figures, never passes or fails. Each row is what the ext_proc sidecar does for one
request, against a bare json.loads + json.dumps of the request body as the floor:

    read + convert           a vllm-sr/5.0 listener reads the request and writes the internal form
    new model                the internal form again, naming the pool member's model (internal_body)
    read + passthrough       a vllm-sr/4.0 listener reads the same body and forwards it
    0.2 plan                 a systemone/0.2 call planned from the IR, with the state_text deviation
    answer 5.0 / 4.0         a 16-answer /v1/decisions reply written for a 5.0 / 4.0 client
    upstream error           an upstream's 422 written for a 4.0 client
    0.2 reply                a systemone/0.2 reply decoded, assembled and written for a 5.0 client

Rates are per second of this process's CPU time, measured in interleaved rounds of which each
figure keeps its best, so a neighbour taking the shared core away counts for no row.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable

from systemone import REGISTRY, Target, WireReply


def request_body() -> bytes:
    questions = {}
    for i in range(16):
        kind = ("choice", "noul", "score", "noul")[i % 4]
        q: dict[str, object] = {"type": kind, "instructions": f"Question {i}: which way does the message lean?"}
        if kind == "choice":
            q["criteria"] = {
                "billing": "Payments, invoices and refunds",
                "engineering": "Outages, errors and bugs",
                "other": None,
            }
        elif kind == "score":
            q["criteria"] = ["calm", "annoyed", "angry", "furious"]
        questions[f"q{i}"] = q
    doc = {
        "model": "vllm-sr/vela3-fast",
        "state": {
            "request": "Our export button fails with a 500 since this morning. " * 20,
            "history": "How do I export invoices as CSV?",
        },
        "roles": {"request": "user", "history": "context"},
        "questions": questions,
        "options": {"deadline_ms": 1500},
    }
    return json.dumps(doc).encode()


def reply_body(model: str = "vela3-fast") -> bytes:
    """What a vllm-sr runtime answers for request_body() on /v1/decisions: floats as Python writes them."""
    rng = random.Random(7)

    def probabilities(names: list[str]) -> dict[str, float]:
        weights = [rng.random() for _ in names]
        return {n: w / sum(weights) for n, w in zip(names, weights)}

    answers: dict[str, object] = {}
    for i in range(16):
        kind = ("choice", "noul", "score", "noul")[i % 4]
        if kind == "choice":
            p = probabilities(["billing", "engineering", "other"])
            answers[f"q{i}"] = {
                "type": "choice",
                "choice": max(p, key=p.__getitem__),
                "probabilities": p,
                "confidence": rng.random(),
            }
        elif kind == "noul":
            answers[f"q{i}"] = {"type": "noul", "noul": rng.random()}
        else:
            p = probabilities(["0", "1", "2", "3"])
            legend = dict(zip(p, ["calm", "annoyed", "angry", "furious"]))
            answers[f"q{i}"] = {
                "type": "score",
                "score": sum(int(k) * v for k, v in p.items()),
                "legend": legend,
                "probabilities": p,
                "confidence": rng.random(),
            }
    return json.dumps({"model": model, "answers": answers, "usage": {"input_tokens": 412, "output_tokens": 0}}).encode()


def upstream_error_body() -> bytes:
    detail = [
        {
            "loc": ["body", "questions", f"q{i}", "choice", "criteria"],
            "msg": "needs at least 2 entries, not 1",
            "type": "too_short",
            "ctx": {"min_length": 2},
        }
        for i in (0, 4)
    ]
    return json.dumps({"detail": detail, "code": "invalid_request", "reason": "validation_failed"}).encode()


def standard_reply_body() -> bytes:
    """A systemone/0.2 server's answer: the runtime's reply without extension members."""
    doc = json.loads(reply_body("d3"))
    return json.dumps({k: doc[k] for k in ("model", "answers", "usage")}).encode()


def best_rates(figures: dict[str, Callable[[], object]], seconds: float, rounds: int = 20) -> dict[str, float]:
    """Calls per second of CPU time, each figure's best of ``rounds`` interleaved rounds."""
    for fn in figures.values():
        for _ in range(50):  # warm up
            fn()
    best = dict.fromkeys(figures, 0.0)
    for _ in range(rounds):
        for name, fn in figures.items():
            n, start = 0, time.process_time()
            while (elapsed := time.process_time() - start) < seconds / rounds:
                for _ in range(20):
                    fn()
                n += 20
            best[name] = max(best[name], n / elapsed)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    body, reply, error, standard = request_body(), reply_body(), upstream_error_body(), standard_reply_body()
    v50, v40 = REGISTRY.listener("vllm-sr/5.0"), REGISTRY.listener("vllm-sr/4.0")
    c02 = REGISTRY.client("systemone/0.2")
    req, req40 = v50.read("/v1/systemone", body), v40.read("/v1/systemone", body)
    assert req.plan.kind == "convert" and req40.plan.kind == "passthrough"
    target = Target(model="d3", deviations=("state_text",))

    def reply_02() -> bytes:
        plan = c02.plan(req.ir, target)
        results = c02.decode_reply(plan, plan.calls[0], WireReply(200, standard))
        return v50.answer_success(req, c02.assemble(plan, results))

    rows = {
        "json.loads + json.dumps (floor)": lambda: json.dumps(json.loads(body)).encode(),
        "vllm-sr/5.0 read + convert (internal form)": lambda: v50.read("/v1/systemone", body),
        "internal form naming the member's model": lambda: req.upstream_body("vela3-fast"),
        "vllm-sr/4.0 read + passthrough": lambda: v40.read("/v1/systemone", body),
        "systemone/0.2 plan + state_text (from IR)": lambda: [c.body for c in c02.plan(req.ir, target).calls],
        "16-answer reply -> vllm-sr/5.0 answer": lambda: v50.answer_success(req, reply),
        "16-answer reply -> vllm-sr/4.0 answer": lambda: v40.answer_success(req40, reply),
        "upstream 422 -> vllm-sr/4.0 error": lambda: v40.answer_upstream_error(req40, 422, (), error),
        "systemone/0.2 reply -> vllm-sr/5.0 answer": reply_02,
    }
    rates = best_rates(rows, args.seconds * len(rows))
    floor_name = next(iter(rows))
    floor = rates[floor_name]
    print(f"request: 16 questions, {len(body)} bytes; reply: 16 answers, {len(reply)} bytes; one core")
    for name, rate in rates.items():
        ratio = "" if name == floor_name else f"  {rate / floor:5.2f}x floor"
        print(f"{name:44s} {rate:10.0f} req/s{ratio:13s}  {1e6 / rate:7.1f} us/req")


if __name__ == "__main__":
    main()
