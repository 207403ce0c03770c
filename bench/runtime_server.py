"""`vllm-srun serve` under closed-loop load: throughput and p50/p99 latency at 1, 8 and 32 clients.

A tiny checkpoint (created here) is served by `vllm-srun serve` as its own process, once with
the state cache (states reused across requests) and once with `--state-cache-mb 0`; then a
larger model of the same preset with the state cache (`--large HIDDENxLAYERS`, default 512x4:
the largest that still answers enough requests in a row's seconds on 2 shared cores). Each
client sends a request, waits for its answer, and sends the next: 4 questions about one of a
few support tickets (a state of --state-words words), so later requests can reuse a state.
The tiny checkpoint with state reuse is also served by `--workers N` processes (default 2).
The client counts take turns in short windows (`--rounds`), so a change in what else the shared
cores run falls on each count alike; req/s is the median window's. Prints figures and ratios; it never fails on time.

    .venv/bin/python bench/runtime_server.py [--preset llama-prefix-bidir] [--clients 1,8,32]
        [--seconds 10] [--rounds 5] [--states 8] [--state-words 120] [--device cpu] [--workers 2] [--large 512x4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from sr_runtime.presets import CORPUS, create

VLLM_SRUN = str(Path(sys.executable).with_name("vllm-srun"))
QUESTIONS = {
    "urgent": {"type": "noul", "instructions": "Does the user report a problem that blocks their work?"},
    "team": {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {"billing": "Payments", "engineering": "Outages and bugs", "other": None},
    },
    "anger": {
        "type": "score",
        "instructions": "How angry is the customer?",
        "criteria": ["calm", "annoyed", "angry", "furious"],
    },
    "refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
}


def states(n: int, words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    vocabulary = CORPUS.split()
    return [" ".join(rng.choice(vocabulary) for _ in range(words)) for _ in range(n)]


class Server:
    """`vllm-srun serve` on a free port, stopped on exit."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([VLLM_SRUN, "serve", *args, "--port", "0"], stderr=subprocess.PIPE, text=True)
        self.url = ""
        for line in self.proc.stderr or ():
            if " url=" in line:
                self.url = line.split(" url=", 1)[1].split()[0]
                break
        if not self.url:
            raise SystemExit(f"vllm-srun serve did not start (exit {self.proc.wait()})")
        while httpx.get(self.url + "/health").status_code != 200:
            time.sleep(0.1)

    def metric(self, name: str) -> float:
        for line in httpx.get(self.url + "/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class Connection:
    """A keep-alive HTTP/1.1 client on asyncio streams: light enough that on a small machine the
    load generator does not take the CPU the server is being measured on (httpx takes ~1 core)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, url: str) -> Connection:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line, *headers = (await self.reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        length = next(int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:"))
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def load(url: str, clients: int, seconds: float, pool: list[str]) -> tuple[int, list[float]]:
    """Closed loop: each client sends its next request when the last one is answered."""
    bodies = [json.dumps({"state": state, "questions": QUESTIONS}).encode() for state in pool]
    latencies: list[float] = []
    end = time.perf_counter() + seconds

    async def client(i: int, conn: Connection) -> None:
        rng = random.Random(i)
        while time.perf_counter() < end:
            start = time.perf_counter()
            status, answer = await conn.post("/v1/systemone", rng.choice(bodies))
            latencies.append(time.perf_counter() - start)
            assert status == 200, answer

    connections = [await Connection.open(url) for _ in range(clients)]
    await connections[0].post("/v1/systemone", bodies[0])  # warm up
    started = time.perf_counter()
    await asyncio.gather(*(client(i, conn) for i, conn in enumerate(connections)))
    elapsed = time.perf_counter() - started
    for conn in connections:
        conn.close()
    return round(len(latencies) / elapsed), latencies


def percentile(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1] if len(values) > 1 else values[0]


def run(
    folder: Path, args: argparse.Namespace, reuse: str, counts: list[int], pool: list[str], label: str, workers: int = 1
) -> dict[int, tuple[int, float]]:
    """One server, a row for each client count; {clients: (req/s, p99 s)}.

    The client counts take turns in `--rounds` short windows, so a change in what else the
    shared cores run falls on every count alike; req/s is the median window's."""
    rates: dict[int, list[int]] = {c: [] for c in counts}
    latencies: dict[int, list[float]] = {c: [] for c in counts}
    calls = {c: 0.0 for c in counts}
    answered = {c: 0.0 for c in counts}
    misses = {c: 0.0 for c in counts}
    with Server(
        str(folder),
        "--device",
        args.device,
        "--state-cache-mb",
        "512" if reuse == "on" else "0",
        "--workers",
        str(workers),
    ) as server:
        for _ in range(args.rounds):
            for clients in counts:
                before = [
                    server.metric(m)
                    for m in (
                        "vsr_runtime_pass_requests_count",
                        "vsr_runtime_pass_requests_sum",
                        "vsr_runtime_state_cache_misses_total",
                    )
                ]
                rate, window = asyncio.run(load(server.url, clients, args.seconds / args.rounds, pool))
                after = [
                    server.metric(m)
                    for m in (
                        "vsr_runtime_pass_requests_count",
                        "vsr_runtime_pass_requests_sum",
                        "vsr_runtime_state_cache_misses_total",
                    )
                ]
                rates[clients].append(rate)
                latencies[clients] += window
                calls[clients] += after[0] - before[0]
                answered[clients] += after[1] - before[1]
                misses[clients] += after[2] - before[2]
    out: dict[int, tuple[int, float]] = {}
    for clients in counts:
        rate, seen = round(statistics.median(rates[clients])), latencies[clients]
        per_call = answered[clients] / max(1.0, calls[clients])
        # A state is computed on a cache miss; requests of one engine call share it anyway.
        computed = misses[clients] / max(1, len(seen))
        p99 = percentile(seen, 99)
        out[clients] = (rate, p99)
        print(
            f"| {label} | {reuse} | {clients} | {rate} ({min(rates[clients])}-{max(rates[clients])}) | "
            f"{percentile(seen, 50) * 1000:.1f} | {p99 * 1000:.1f} | {per_call:.1f} | {computed:.2f} |",
            flush=True,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="llama-prefix-bidir")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per client count, in --rounds windows")
    parser.add_argument("--rounds", type=int, default=5, help="windows per client count, the counts taking turns")
    parser.add_argument("--states", type=int, default=8)
    parser.add_argument(
        "--state-words", type=int, default=120, help="words per state (about 4 tokens each in the tiny tokenizer)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="also the tiny checkpoint with state reuse on `vllm-srun serve --workers N` (1: not)",
    )
    parser.add_argument(
        "--large", default="512x4", help="the larger model: HIDDENxLAYERS of the same preset ('' for none)"
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    pool = states(args.states, args.state_words)
    top = max(counts)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = create(Path(tmp) / args.preset, args.preset, seed=0)
        print(
            f"# vllm-srun serve {args.preset} --device {args.device}: {len(QUESTIONS)} questions a request, "
            f"{args.states} distinct states of {args.state_words} words, {args.seconds:.0f} s per row in "
            f"{args.rounds} windows taking turns, {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.1f}\n"
        )
        print(
            "| model | state reuse | clients | req/s (median window; range) | p50 ms | p99 ms | requests per "
            "engine call | states computed per request |"
        )
        print("|---|---|---|---|---|---|---|---|")
        rates = {reuse: run(tiny, args, reuse, counts, pool, "tiny") for reuse in ("on", "off")}
        workers = (
            run(tiny, args, "on", counts, pool, f"tiny, {args.workers} workers", args.workers)
            if args.workers > 1
            else None
        )
        large = None
        if args.large:
            hidden, layers = (int(x) for x in args.large.split("x"))
            folder = create(Path(tmp) / "large", args.preset, seed=0, hidden=hidden, layers=layers)
            large = run(folder, args, "on", counts, pool, f"hidden {hidden}, {layers} layers")
        print()
        for reuse in ("on", "off"):
            r = rates[reuse]
            print(
                f"tiny, state reuse {reuse}: throughput at {top} clients / at 1 client = "
                f"{r[top][0] / r[1][0]:.2f}; p99 at {top} clients {r[top][1] * 1000:.0f} ms"
            )
        if large is not None:
            print(
                f"{args.large}, state reuse on: throughput at {top} clients / at 1 client = "
                f"{large[top][0] / large[1][0]:.2f}; p99 at {top} clients {large[top][1] * 1000:.0f} ms"
            )
        for clients in counts:
            print(
                f"tiny, {clients} clients: throughput with state reuse / without = "
                f"{rates['on'][clients][0] / rates['off'][clients][0]:.2f}"
            )
        if workers is not None:
            print(
                f"tiny, {args.workers} workers, state reuse on: throughput at {top} clients / at 1 client = "
                f"{workers[top][0] / workers[1][0]:.2f}; p99 at {top} clients {workers[top][1] * 1000:.0f} "
                f"ms; at {top} clients {workers[top][0] / rates['on'][top][0]:.2f}x one worker"
            )
        if 1 in counts:
            for label, r in (("one worker", rates["on"]), (f"--workers {args.workers}", workers)):
                if r is not None:
                    verdict = "meets" if r[top][0] >= 3 * r[1][0] else "MISSES"
                    print(
                        f"# issue 14's target: at least 3x from 1 to {top} clients on the tiny checkpoint "
                        f"with state reuse on, {label}: {verdict}"
                    )


if __name__ == "__main__":
    main()
