"""Reliability figures: the scenarios of tests/reliability, run longer, with every part real.

    .venv/bin/python bench/reliability.py [--restarts 2] [--examples 1000] [--bursts 5] [--clients 32]
                                          [--samples 200] [--only restarts,edits,bad,overload,hol]

1. ``vllm-sr xds serve`` killed (SIGKILL) under steady traffic through Envoy and started again,
   over delta and state-of-the-world ADS: with the config edited while it was down (a new
   deployment, a new pool on the listener in use, a new listener) and unchanged.
2. Invalid edits under traffic: YAML syntax, schema, a dangling pool member, a broken template.
3. ``vllm-srun serve`` under bad input (fixed cases and hypothesis requests), then four bodies
   over 32 MiB at once; the server's peak resident memory.
4. ``vllm-srun serve --max-queue 2`` under bursts of concurrent requests, then one at a time.
5. Head-of-line: ``vllm-srun serve default`` (what ``vllm-sr serve`` runs), straight and through
   Envoy and the sidecar: a one-question request's p50/p99 idle, and while a 200-state
   ``/v1/systemone/batch`` is in flight (target: p99 within 3x of idle), sent one after another
   with a random pause of 0-100 ms before each.

Prints, per scenario, requests sent, failed and the longest time any request waited, and the
scenario's own figures (time to resync, peak RSS, statuses); never fails on time.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

# Run as `python bench/reliability.py`: the scenarios live in the test suite, beside the real parts
# they start; this file's own folder must not shadow packages.
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent)]

from sr_runtime.presets import create  # noqa: E402
from tests.extproc.harness import Runtime  # noqa: E402
from tests.reliability.front import batch, front  # noqa: E402
from tests.reliability.parts import ASK, Figures, peak_rss, post, stack, write  # noqa: E402
from tests.reliability.runtime_scenarios import (  # noqa: E402
    OVER,
    TUNED_FLAGS,
    Tuned,
    bad_input,
    chunked,
    exchange,
    head_of,
    overload,
    repeated,
    wait_ready,
)  # noqa: E402
from tests.reliability.scenarios import invalid_edits, xds_restart  # noqa: E402

MiB = 2**20
rows: list[tuple[str, Figures, str]] = []


def row(name: str, figures: Figures, more: str = "") -> None:
    rows.append((name, figures, more))
    print(f"{name}: {figures}{'; ' + more if more else ''}", flush=True)


def restarts(directory: Path, member: Runtime, count: int) -> None:
    for ads in ("delta", "sotw"):
        with stack(directory / f"restart-{ads}", member, ads=ads) as s:
            for i in range(count):
                edit = i % 2 == 0
                if not edit:
                    write(s.config, s.text())  # back to the first config, while it runs
                    s.wait_synced(s.text())
                r = xds_restart(s, edit=edit)
                what = "edited while down" if edit else "unchanged"
                back = ", ".join(f"{node} {seconds:.2f} s" for node, seconds in sorted(r.reconnected_s.items()))
                more = (
                    f"down {r.down_s:.1f} s, answered {r.answered_while_down} meanwhile; after the restart: "
                    f"reconnected {back}, resynced {r.resync_s:.2f} s"
                )
                if edit:
                    more += f", new listener answering after {r.new_listener_s:.2f} s"
                row(f"xds restart ({ads}, config {what})", r.figures, more)
                for f in r.failures[:3]:
                    print(f"    failed: {f.status} {f.error} {f.body[:200]!r}")


def edits(directory: Path, member: Runtime) -> None:
    with stack(directory / "edits", member, in_process=True) as s:
        r = invalid_edits(s)
    refused = ", ".join(
        (
            f"{x.edit}: {x.result} at line "
            f"{x.problems[0]['line'] if x.problems else '?'}{'' if x.still_acked else ' (PUSHED)'}"
        )
        for x in r.refusals
    )
    row("invalid edits", r.figures, f"{refused}; next valid edit served: {r.next_valid_served}")


def bad(directory: Path, tiny: Path, examples: int) -> None:
    runtime = wait_ready(Tuned(tiny, directory / "bad-input.log").start())
    try:
        r = bad_input(runtime, examples=examples, seed=None)
        statuses = " ".join(f"{k}:{v}" for k, v in sorted(r.statuses.items()))
        row(
            "runtime bad input",
            r.figures,
            (
                f"statuses {statuses}; alive after: {r.alive}; peak RSS {r.rss_before / MiB:.0f} MiB loaded -> "
                f"{r.rss_peak / MiB:.0f} MiB"
            ),
        )
        for f in r.failures[:5]:
            print(f"    failed: {f.case} {f.status} {f.error} {f.body[:200]!r}")
        # Four chunked bodies over 32 MiB at once: what the limit costs in memory when several arrive.
        answers: list[int] = []

        def big() -> None:
            # chunked: no length to refuse up front, so the server reads up to the limit
            answers.append(
                exchange(
                    runtime.port,
                    "big",
                    head_of(
                        "/v1/systemone", [("content-type", "application/json"), ("transfer-encoding", "chunked")], None
                    ),
                    chunked(repeated(b" " * MiB, OVER)),
                ).status
            )

        threads = [threading.Thread(target=big) for _ in range(4)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        row(
            "runtime, 4 chunked bodies over 32 MiB at once",
            Figures(len(answers), sum(a != 413 for a in answers), time.monotonic() - started),
            f"statuses {sorted(answers)}; peak RSS {peak_rss(runtime.pid) / MiB:.0f} MiB",
        )
    finally:
        runtime.stop()


def overloaded(directory: Path, tiny: Path, bursts: int, clients: int) -> None:
    runtime = wait_ready(Tuned(tiny, directory / "overload.log", *TUNED_FLAGS).start())
    try:
        r = overload(runtime, clients=clients, bursts=bursts, after=20)
        statuses = " ".join(f"{k}:{v}" for k, v in sorted(r.statuses.items()))
        row(
            f"runtime overload ({bursts} bursts of {clients}, {' '.join(TUNED_FLAGS)})",
            r.burst,
            (
                f"statuses {statuses}; longest 529 {r.longest_529_s * 1000:.0f} ms, longest 200 "
                f"{r.longest_200_s * 1000:.0f} ms"
            ),
        )
        row("runtime after the bursts, one client", r.after)
    finally:
        runtime.stop()


ONE = {k: v for k, v in ASK.items() if k != "model"}  # the runtime alone knows no vllm-sr/auto


def _timed(port: int) -> float:
    # A client that asks now and then, not the instant its last answer came: its requests land
    # anywhere in a batch's slice, as independent clients' do (a closed loop would always land
    # just after the slice began, the worst case, every time).
    time.sleep(random.uniform(0, 0.1))
    sent = time.monotonic()
    reply = post(port, ONE, timeout=120)
    assert reply.status == 200, reply.body
    return time.monotonic() - sent


def _percentiles(seconds: list[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def head_of_line(directory: Path, samples: int) -> None:
    runtime = Runtime(Path("default"), directory / "default.log").start().wait()
    try:
        with front(directory / "hol", runtime.url, max_deadline_ms=300_000) as listener:
            for name, port in (("runtime alone", runtime.port), ("through the listener", listener)):
                for _ in range(10):
                    _timed(port)  # warm: a model's first passes are slow
                idle = [_timed(port) for _ in range(samples)]
                busy: list[float] = []
                batches: list[tuple[int, float]] = []
                while len(busy) < samples:

                    def big(port: int, batches: list[tuple[int, float]]) -> None:
                        sent = time.monotonic()
                        status = post(port, batch(200), path="/v1/systemone/batch", timeout=600).status
                        batches.append((status, time.monotonic() - sent))

                    thread = threading.Thread(target=big, args=(port, batches))
                    thread.start()
                    time.sleep(0.3)  # the batch reaches the runtime first
                    while thread.is_alive() and len(busy) < samples:
                        busy.append(_timed(port))
                    thread.join()
                (i50, i99), (b50, b99) = _percentiles(idle), _percentiles(busy)
                row(
                    f"head-of-line, default, {name}",
                    Figures(len(idle) + len(busy), 0, max(idle + busy)),
                    f"one question idle p50 {i50 * 1000:.0f} ms p99 {i99 * 1000:.0f} ms; with a 200-state "
                    f"batch in flight p50 {b50 * 1000:.0f} ms p99 {b99 * 1000:.0f} ms ({b99 / i99:.2f}x idle "
                    "p99, target <= 3x); batches "
                    f"{', '.join(f'{status} in {s:.1f} s' for status, s in batches)}",
                )
    finally:
        runtime.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--restarts",
        type=int,
        default=2,
        help="control-plane restarts per ADS protocol (alternately edited and unchanged)",
    )
    parser.add_argument("--examples", type=int, default=1000, help="hypothesis requests against the runtime")
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--clients", type=int, default=32, help="requests released at once per burst")
    parser.add_argument(
        "--samples", type=int, default=200, help="one-question requests timed idle, and again beside batches"
    )
    parser.add_argument(
        "--only", default="restarts,edits,bad,overload,hol", help="the scenarios to run, comma-separated"
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="vsr-reliability-") as tmp:
        directory = Path(tmp)
        tiny = create(directory / "tiny", "llama-prefix-bidir", seed=0)
        if only & {"restarts", "edits"}:
            member = Runtime(tiny, directory / "member.log").start().wait()
            try:
                if "restarts" in only:
                    restarts(directory, member, args.restarts)
                if "edits" in only:
                    edits(directory, member)
            finally:
                member.stop()
        if "bad" in only:
            bad(directory, tiny, args.examples)
        if "overload" in only:
            overloaded(directory, tiny, args.bursts, args.clients)
        if "hol" in only:
            head_of_line(directory, args.samples)
    print("\n| scenario | sent | failed | longest wait | |\n|---|---|---|---|---|")
    for name, f, more in rows:
        print(f"| {name} | {f.sent} | {f.failed} | {f.longest_wait_s * 1000:.0f} ms | {more} |")


if __name__ == "__main__":
    main()
