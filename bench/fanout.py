"""Fan-out: one control plane, many ADS nodes; how long until every node holds an edit.

    .venv/bin/python bench/fanout.py [--nodes 100,500,2000] [--edits 20] [--listeners 20] [--out fanout.json]
    .venv/bin/python bench/fanout.py --small      # a few nodes and edits: what tests/fleet runs

``vllm-sr xds serve`` runs as its own process on a config of ``--listeners`` listeners; the nodes
are simulated (tests/fleet/nodes.py), a tenth of them sidecars (delta, every listener) and the
rest Envoys (SotW: clusters, listeners, routes), spread over worker processes of at most
``--per-process`` nodes each. Each edit moves one listener to another port and toggles whether it
offers the Responses API (its listener, route table and sidecar data change, never to a version
served before) and is saved by an atomic rename. ``--plane-from DIR`` runs the control plane of
another checkout (a commit to compare with), each edit's versions compiled by that checkout.

For each node count it prints:

- edit -> all ACKed: from the rename until the last node ACKed the new versions (p50 / p99 /
  max over the edits), which includes the file watch noticing the edit and the compile;
  served -> all ACKed: the same, from the moment the control plane published the version
  (``/status`` ``served_since``), which is the push path alone;
- the control plane's CPU (share of one core) and RSS, idle (all nodes connected and in step)
  and while pushing (from each rename until every node ACKed);
- bytes serialized per edit (``vsr_xds_encoded_bytes_total`` of ``/metrics``), which must not
  grow with the node count.

Targets: 500 nodes all ACKed within 1 s at p99, 2,000 within 3 s; idle CPU under 5% of a core
at 500 nodes. It never fails on time. The nodes' times are ``time.monotonic()``, one clock for
every process of the host.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Run as `python bench/fanout.py`: the simulated nodes live in the test suite.
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent)]

import psutil  # noqa: E402

from sr_control.compiler import compile  # noqa: E402
from sr_control.compiler.protos import TYPE_NAMES  # noqa: E402
from sr_control.config.load import load_text  # noqa: E402
from tests.fleet.nodes import Fleet  # noqa: E402
from tests.xds.xds_support import config_text, free_port  # noqa: E402

VLLM_SR = str(Path(sys.executable).parent / "vllm-sr")
TARGETS_S = {500: 1.0, 2000: 3.0}
IDLE_CPU_TARGET = 0.05
_ENCODED = re.compile(r"^vsr_xds_encoded_bytes_total(?:\{[^}]*\})? (\S+)$", re.M)


# -- the nodes, in worker processes


def _worker(conn: Connection, address: str, envoys: int, sidecars: int, prefix: str) -> None:
    asyncio.run(_serve_fleet(conn, address, envoys, sidecars, prefix))


async def _serve_fleet(conn: Connection, address: str, envoys: int, sidecars: int, prefix: str) -> None:
    loop = asyncio.get_running_loop()
    async with Fleet(address, envoys=envoys, sidecars=sidecars, prefix=prefix, backoff=(0.2, 2.0)) as fleet:
        while True:
            message = await loop.run_in_executor(None, conn.recv)
            if message is None:
                break
            versions, timeout = message
            try:
                await fleet.in_step(versions, timeout)
                conn.send(("ok", fleet.in_step_at(versions)))
            except TimeoutError as exc:
                conn.send((str(exc), fleet.in_step_at(versions)))


class Nodes:
    """``count`` simulated nodes over worker processes; ``in_step`` asks them all."""

    def __init__(self, address: str, count: int, per_process: int) -> None:
        sidecars = max(1, count // 10)
        envoys = count - sidecars
        self.count = count
        self._workers: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
        processes = max(1, -(-count // per_process))
        context = multiprocessing.get_context("spawn")
        for i in range(processes):
            e = envoys // processes + (1 if i < envoys % processes else 0)
            s = sidecars // processes + (1 if i < sidecars % processes else 0)
            ours, theirs = context.Pipe()
            process = context.Process(target=_worker, args=(theirs, address, e, s, f"w{i}"), daemon=True)
            process.start()
            self._workers.append((process, ours))

    def in_step(self, versions: dict[str, str], timeout: float) -> tuple[list[str], dict[str, float]]:
        """(problems, node -> when it took the versions)."""
        for _, conn in self._workers:
            conn.send((versions, timeout))
        problems, at = [], {}
        for _, conn in self._workers:
            result, times = conn.recv()
            if result != "ok":
                problems.append(result)
            at.update(times)
        return problems, at

    def close(self) -> None:
        for process, conn in self._workers:
            conn.send(None)
            process.join(10)
            if process.is_alive():
                process.kill()


# -- the control plane


# Runs `vllm-sr` from another checkout (``--plane-from``), ahead of this one's editable install.
_FROM = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in str(f)]
sys.path.insert(0, sys.argv.pop(1))
from sr_control.cli import main
sys.argv[0] = "vllm-sr"
main()
"""


_COMPILE = """import json
from sr_control.compiler import compile
from sr_control.compiler.protos import TYPE_NAMES
from sr_control.config.load import load_text
out = []
for text in json.load(sys.stdin):
    resources = compile(load_text(text))
    out.append({t: resources.type_version(t) for t in TYPE_NAMES if resources[t]})
print(json.dumps(out))
"""


class Plane:
    def __init__(self, directory: Path, text: str, max_streams: int, source: Path | None = None) -> None:
        self.config = directory / "config.yaml"
        self.write(text)
        self.port, self.status_port = free_port(), free_port()
        args = ["xds", "serve", "--config", str(self.config), "--host", "127.0.0.1"]
        args += ["--port", str(self.port), "--status-port", str(self.status_port), "--max-streams", str(max_streams)]
        self._log = open(directory / "xds.log", "wb")
        command = [VLLM_SR] if source is None else [sys.executable, "-c", _FROM, str(source)]
        self.proc = subprocess.Popen([*command, *args], stdout=self._log, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.proc.pid)
        deadline = time.monotonic() + 60
        while not self._up():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"the control plane did not start; see {directory / 'xds.log'}")
            time.sleep(0.05)

    def _up(self) -> bool:
        try:
            return bool(self.status()["version"])
        except OSError:
            return False

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.status_port}{path}", timeout=10) as r:
            return r.read()  # type: ignore[no-any-return]

    def status(self) -> dict[str, Any]:
        return json.loads(self.get("/status"))  # type: ignore[no-any-return]

    def served(self, after: dict[str, str] | None = None) -> dict[str, str]:
        """The type versions served (once they differ from ``after``), as in ``type_versions``."""
        while True:
            types = {_url(name): v for name, v in self.status()["type_versions"].items() if v and name != "endpoints"}
            if types != after:
                return types
            time.sleep(0.02)

    def encoded_bytes(self) -> float | None:
        found = _ENCODED.findall(self.get("/metrics").decode())
        return sum(float(v) for v in found) if found else None

    def cpu_s(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def rss_mib(self) -> float:
        return float(self.ps.memory_info().rss) / 2**20

    def write(self, text: str) -> None:
        """Save as an editor or ConfigMap does: a new file renamed over the old (read at once)."""
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


# -- one node count


def config(listeners: int, edit: int) -> str:
    """The config after ``edit`` edits: each moves listener l0 to another port and toggles whether
    it offers the Responses API, so every edit is new content (its listener, route table and
    sidecar data), never a version served before."""
    ports = {f"l{i}": 20000 + i for i in range(listeners)}
    text = config_text(ports)
    apis = "{chat_completions: {}, responses: {}}" if edit % 2 else "{chat_completions: {}}"
    edited = text.replace(
        "  - {name: l0, address: 127.0.0.1, port: 20000, apis: {chat_completions: {}}}",
        f"  - {{name: l0, address: 127.0.0.1, port: {30000 + edit}, apis: {apis}}}",
    )
    assert edited != text or edit == 0
    return edited


def type_versions(texts: list[str], source: Path | None) -> list[dict[str, str]]:
    """Each config's type versions, as ``source`` (default: this checkout) compiles it."""
    if source is None:
        return [_type_versions(text) for text in texts]
    boot = _FROM.split("from sr_control.cli")[0] + _COMPILE
    done = subprocess.run(
        [sys.executable, "-c", boot, str(source)],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _type_versions(text: str) -> dict[str, str]:
    resources = compile(load_text(text))
    return {t: resources.type_version(t) for t in TYPE_NAMES if resources[t]}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_count(count: int, args: argparse.Namespace) -> dict[str, Any]:
    base = config(args.listeners, 0)
    # Every edit's type versions, compiled by the checkout the control plane runs from.
    compiled = type_versions([config(args.listeners, i) for i in range(args.edits + 1)], args.plane_from)
    clock_offset = time.time() - time.monotonic()  # wall clock -> monotonic, for served_since
    with tempfile.TemporaryDirectory(prefix="fanout-") as tmp:
        plane = Plane(Path(tmp), base, max_streams=count + 64, source=args.plane_from)
        nodes = None
        try:
            first = compiled[0]
            assert plane.served() == first, "the config compiles otherwise here than in the control plane"
            start = time.monotonic()
            nodes = Nodes(f"127.0.0.1:{plane.port}", count, args.per_process)
            problems, _ = nodes.in_step(first, timeout=120)
            if problems:
                raise RuntimeError(f"{count} nodes: the first load did not reach every node: {problems}")
            connect_s = time.monotonic() - start
            time.sleep(0.5)  # let the connection burst's work settle
            cpu0, t0 = plane.cpu_s(), time.monotonic()
            time.sleep(args.idle)
            idle_cpu = (plane.cpu_s() - cpu0) / (time.monotonic() - t0)
            idle_rss = plane.rss_mib()
            all_acked, served_acked, encoded, busy_cpu, busy_wall, rss, lagging = [], [], [], 0.0, 0.0, [], []
            for i in range(1, args.edits + 1):
                text = config(args.listeners, i)
                versions = compiled[i]
                before = plane.encoded_bytes()
                cpu0, edit_at = plane.cpu_s(), time.monotonic()
                plane.write(text)
                problems, at = nodes.in_step(versions, timeout=60)
                done = time.monotonic()
                busy_cpu += plane.cpu_s() - cpu0
                busy_wall += done - edit_at
                rss.append(plane.rss_mib())
                if problems:
                    lagging.extend(problems)
                    continue
                last = max(at.values())
                served = datetime.fromisoformat(plane.status()["served_since"]).timestamp() - clock_offset
                all_acked.append(last - edit_at)
                served_acked.append(last - served)
                after = plane.encoded_bytes()
                if before is not None and after is not None:
                    encoded.append(after - before)
                time.sleep(args.pause)
        finally:
            if nodes is not None:
                nodes.close()
            plane.stop()
    row: dict[str, Any] = {
        "nodes": count,
        "connect_s": round(connect_s, 2),
        "edits": len(all_acked),
        "not_in_step": lagging,
        "idle_cpu": round(idle_cpu, 4),
        "idle_rss_mib": round(idle_rss, 1),
        "push_cpu": round(busy_cpu / busy_wall, 3) if busy_wall else None,
        "push_rss_mib": round(max(rss), 1) if rss else None,
        "encoded_bytes_per_edit": statistics.median(encoded) if encoded else None,
    }
    for name, values in (("edit_to_all_acked_s", all_acked), ("served_to_all_acked_s", served_acked)):
        if values:
            row[name] = {
                "p50": round(statistics.median(values), 4),
                "p99": round(percentile(values, 0.99), 4),
                "max": round(max(values), 4),
            }
    return row


def _url(name: str) -> str:
    return next(t for t, n in TYPE_NAMES.items() if n == name)


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'nodes':>6} {'edit->all ACK p50/p99/max (s)':>30} {'served->all p50/p99/max':>26} "
        f"{'idle CPU':>8} {'push CPU':>8} {'RSS idle/push MiB':>18} {'bytes/edit':>10}"
    )
    print(head)

    def three(r: dict[str, Any], key: str) -> str:
        v = r.get(key)
        return f"{v['p50']:.3f}/{v['p99']:.3f}/{v['max']:.3f}" if v else "-"

    for r in rows:
        encoded = r["encoded_bytes_per_edit"]
        print(
            f"{r['nodes']:>6} {three(r, 'edit_to_all_acked_s'):>30} {three(r, 'served_to_all_acked_s'):>26} "
            f"{r['idle_cpu']:>8.1%} {r['push_cpu'] or 0:>8.1%} "
            f"{r['idle_rss_mib']:>8.0f}/{r['push_rss_mib'] or 0:<9.0f} {'-' if encoded is None else int(encoded):>10}"
        )
        if r["not_in_step"]:
            print(f"       {len(r['not_in_step'])} edits did not reach every node: {r['not_in_step'][0]}")
    for count, target in TARGETS_S.items():
        row = next((r for r in rows if r["nodes"] == count), None)
        if row and row.get("edit_to_all_acked_s"):
            p99 = row["edit_to_all_acked_s"]["p99"]
            met = "met" if p99 <= target else "MISSED"
            print(f"target: {count} nodes all ACKed within {target} s at p99: {p99:.3f} s ({met})")
    row = next((r for r in rows if r["nodes"] == 500), None)
    if row:
        met = "met" if row["idle_cpu"] < IDLE_CPU_TARGET else "MISSED"
        print(f"target: idle CPU under {IDLE_CPU_TARGET:.0%} of a core at 500 nodes: {row['idle_cpu']:.1%} ({met})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="100,500,2000", help="node counts, comma-separated")
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--listeners", type=int, default=20)
    parser.add_argument("--per-process", type=int, default=250, help="simulated nodes per worker process")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle CPU measured")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between edits")
    parser.add_argument("--small", action="store_true", help="10 and 30 nodes, 4 edits: a check that it runs")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument(
        "--plane-from", type=Path, help="run the control plane from this checkout (to compare with another commit)"
    )
    args = parser.parse_args()
    if args.small:
        args.nodes, args.edits, args.listeners, args.idle, args.per_process, args.pause = "10,30", 4, 3, 0.5, 50, 0.1
    rows = []
    for count in (int(n) for n in args.nodes.split(",")):
        rows.append(run_count(count, args))
        print(f"{count} nodes: {json.dumps(rows[-1])}", flush=True)
    print()
    print_table(rows)
    if args.out is not None:
        report = {"rows": rows, "cpus": os.cpu_count(), "python": sys.version.split()[0]}
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
