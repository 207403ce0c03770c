"""Requests per second for read + convert of a 16-question request, on one core.

    .venv/bin/python bench/codec.py [--seconds 2]

Prints figures, never passes or fails: read + convert on a vllm-sr/5.0 listener (the sidecar's
work per request), a vllm-sr/4.0 passthrough read, and a systemone/0.2 client plan with the
state_text deviation, each against a bare json.loads + json.dumps of the same body as the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

from sr_control.systemone import REGISTRY, Target


def request_body() -> bytes:
    questions = {}
    for i in range(16):
        kind = ("choice", "noul", "score", "noul")[i % 4]
        q: dict[str, object] = {"type": kind, "instructions": f"Question {i}: which way does the message lean?"}
        if kind == "choice":
            q["criteria"] = {"billing": "Payments, invoices and refunds", "engineering": "Outages, errors and bugs", "other": None}
        elif kind == "score":
            q["criteria"] = ["calm", "annoyed", "angry", "furious"]
        questions[f"q{i}"] = q
    doc = {
        "model": "vllm-sr/vela3-fast",
        "state": {"request": "Our export button fails with a 500 since this morning. " * 20, "history": "How do I export invoices as CSV?"},
        "roles": {"request": "user", "history": "context"},
        "questions": questions,
        "options": {"deadline_ms": 1500},
    }
    return json.dumps(doc).encode()


def rate(fn: Callable[[], object], seconds: float) -> float:
    for _ in range(200):  # warm up
        fn()
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(100):
            fn()
        n += 100
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    body = request_body()
    v50, v40 = REGISTRY.listener("vllm-sr/5.0"), REGISTRY.listener("vllm-sr/4.0")
    c02 = REGISTRY.client("systemone/0.2")
    req = v50.read("/v1/systemone", body)
    assert req.plan.kind == "convert"
    target = Target(model="d3", deviations=("state_text",))

    floor = rate(lambda: json.dumps(json.loads(body)).encode(), args.seconds)
    convert = rate(lambda: v50.read("/v1/systemone", body), args.seconds)
    passthrough = rate(lambda: v40.read("/v1/systemone", body), args.seconds)
    plan = rate(lambda: [c.body for c in c02.plan(req.ir, target).calls], args.seconds)

    print(f"request: 16 questions, {len(body)} bytes; one core")
    print(f"{'json.loads + json.dumps (floor)':44s} {floor:10.0f} req/s")
    print(f"{'vllm-sr/5.0 read + convert (internal form)':44s} {convert:10.0f} req/s  {convert / floor:5.2f}x floor  {1e6 / convert:7.1f} us/req")
    print(f"{'vllm-sr/4.0 read + passthrough':44s} {passthrough:10.0f} req/s  {passthrough / floor:5.2f}x floor  {1e6 / passthrough:7.1f} us/req")
    print(f"{'systemone/0.2 plan + state_text (from IR)':44s} {plan:10.0f} req/s  {plan / floor:5.2f}x floor  {1e6 / plan:7.1f} us/req")


if __name__ == "__main__":
    main()
