"""What the ext_proc sidecar costs, measured through a real Envoy.

    .venv/bin/python bench/extproc.py [--requests 2000] [--seconds 5]

1. Added latency: a 4-question System One request through Envoy with the sidecar, against the
   same request through the same Envoy config with a bare ext_proc that only names the cluster
   (same route, same processing mode: four messages a request). The member is a canned
   upstream answering /v1/decisions at once (and calling its reply whole, as a vllm-srun
   runtime does), so the difference is the sidecar's own work. Measured for both ways of
   reaching the member, the three stacks taking turns: Envoy forwards (``--forwarding envoy``,
   what ``auto`` does for a Service's pods) and the sidecar calls it itself (the default,
   ``auto``, for a member of one host as this one is).
2. Throughput with 1 and 2 sidecar workers (client processes on keep-alive connections).
3. The whole listener path against calling the runtime directly (``vllm-srun serve`` on a tiny
   checkpoint).

Prints figures and the target (at most 0.3 ms p50 added); never fails on time.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

# Run as `python bench/extproc.py`, this file's folder leads sys.path; keep it from shadowing packages.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from sr_control.compiler import Address, Settings, bootstrap  # noqa: E402
from sr_control.compiler.envoy import envoy_binary  # noqa: E402
from sr_control.compiler.output import to_yaml  # noqa: E402
from sr_control.compiler.protos import to_dict  # noqa: E402
from sr_control.extproc.server import run_loop  # noqa: E402
from sr_control.xds import ControlPlane  # noqa: E402

BIN = Path(sys.executable).parent
TARGET_ADDED_MS = 0.3
QUESTIONS = {
    "urgent": {"type": "noul", "instructions": "Does the user report a problem that blocks their work?"},
    "team": {
        "type": "choice",
        "instructions": "Which team?",
        "criteria": {"billing": "Payments", "engineering": "Outages and bugs", "other": None},
    },
    "anger": {"type": "score", "instructions": "How angry?", "criteria": ["calm", "annoyed", "furious"]},
    "refund": {"type": "noul", "instructions": "Does the user ask for money back?"},
}
REQUEST = json.dumps(
    {
        "model": "d3",
        "state": {
            "request": "Our export button fails with a 500 since this morning. Open a ticket.",
            "history": "How do I export invoices?",
        },
        "roles": {"request": "user", "history": "context"},
        "questions": QUESTIONS,
        "options": {"deadline_ms": 1500},
    }
).encode()
REPLY = json.dumps(
    {
        "model": "d3",
        "answers": {
            "urgent": {"type": "noul", "noul": 0.88},
            "team": {
                "type": "choice",
                "choice": "engineering",
                "probabilities": {"billing": 0.04, "engineering": 0.93, "other": 0.03},
                "confidence": 0.895,
            },
            "anger": {
                "type": "score",
                "score": 1.1,
                "legend": {"0": "calm", "1": "annoyed", "2": "furious"},
                "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3},
                "confidence": 0.4,
            },
            "refund": {"type": "noul", "noul": 0.05},
        },
        "usage": {"input_tokens": 212, "output_tokens": 0},
    }
).encode()
CARD = json.dumps(
    {
        "models": [
            {
                "name": "d3",
                "description": "canned",
                "release_date": "2026-01-01",
                "version": "5.0",
                "features": ["noul", "choice", "score"],
                "card": {
                    "question_types": ["noul", "choice", "score"],
                    "modalities": ["text"],
                    "presets": [],
                    "limits": {"max_options": 255, "min_levels": 2, "max_levels": 10, "max_input_tokens": 16384},
                },
            }
        ]
    }
).encode()
HEALTH = b'{"status": "ready", "ready": true, "api_version": "5.0.0", "model": "d3", "schema": "vllm-sr/5.0"}'


# ---------------------------------------------------------------------------- the two stand-ins


def canned_upstream(port: int) -> None:
    """A vllm-sr/5.0 member that answers at once: /health, /v1/models and a 4-answer decisions
    reply, which it calls whole as a vllm-srun runtime does (``x-vsr-reply: whole``)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = next(
                    (int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")), 0
                )
                if length:
                    await reader.readexactly(length)
                body = {"/health": HEALTH, "/v1/models": CARD}.get(path, REPLY)
                # A runtime's word that its decisions reply answers every question (REPLY does).
                whole = b"x-vsr-reply: whole\r\n" if body is REPLY else b""
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n%s"
                    % (whole, len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", port)
        await server.serve_forever()

    asyncio.run(main())


def echo_extproc(port: int, cluster: str) -> None:
    """The bare ext_proc: names the cluster and the member's path, changes nothing else."""
    import grpc
    from envoy.config.core.v3 import base_pb2
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

    overwrite = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
    route = pb.ProcessingResponse(
        request_body=pb.BodyResponse(
            response=pb.CommonResponse(
                header_mutation=pb.HeaderMutation(
                    set_headers=[
                        base_pb2.HeaderValueOption(
                            header=base_pb2.HeaderValue(key="x-vsr-cluster", raw_value=cluster.encode()),
                            append_action=overwrite,
                        ),
                        base_pb2.HeaderValueOption(
                            header=base_pb2.HeaderValue(key=":path", raw_value=b"/v1/decisions"),
                            append_action=overwrite,
                        ),
                    ]
                ),
                clear_route_cache=True,
            )
        )
    )
    answers = {
        "request_headers": pb.ProcessingResponse(request_headers=pb.HeadersResponse()),
        "request_body": route,
        "response_headers": pb.ProcessingResponse(response_headers=pb.HeadersResponse()),
        "response_body": pb.ProcessingResponse(response_body=pb.BodyResponse()),
    }

    class Echo(pb_grpc.ExternalProcessorServicer):
        async def Process(self, requests, context):  # type: ignore[no-untyped-def]  # noqa: N802
            async for message in requests:
                yield answers[message.WhichOneof("request")]

    async def main() -> None:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_ExternalProcessorServicer_to_server(Echo(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    # The sidecar's own loop (uvloop), so that the difference is the sidecar's work, not the loop's.
    run_loop(main())


# ---------------------------------------------------------------------------- measuring


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


def latencies(port: int, path: str, body: bytes, n: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    out = []
    for i in range(n + n // 5):
        t = time.perf_counter()
        conn.request("POST", path, body, {"content-type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        if reply.status != 200:
            raise RuntimeError(f"{path} on :{port} answered {reply.status}")
        if i >= n // 5:  # the first fifth warms up
            out.append((time.perf_counter() - t) * 1000)
    conn.close()
    return out


def _hammer(port: int, seconds: float, counter: multiprocessing.Value) -> None:  # type: ignore[valid-type]
    conn = http.client.HTTPConnection("127.0.0.1", port)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        conn.request("POST", "/v1/systemone", REQUEST, {"content-type": "application/json"})
        conn.getresponse().read()
        n += 1
    with counter.get_lock():
        counter.value += n


def throughput(port: int, seconds: float, clients: int = 8) -> float:
    ctx = multiprocessing.get_context("spawn")  # this process runs gRPC threads: no fork
    counter = ctx.Value("i", 0)
    procs = [ctx.Process(target=_hammer, args=(port, seconds, counter)) for _ in range(clients)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return counter.value / seconds


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def interleaved(stacks: list[tuple[int, list[int]]], n: int, rounds: int = 5) -> tuple[list[list[float]], list[float]]:
    """Latencies of each stack (its listener port and the pids whose CPU it uses), measured in
    alternating rounds so that load from outside falls on each alike; and each stack's CPU
    milliseconds per request over those rounds (the measure load cannot inflate much)."""
    ms: list[list[float]] = [[] for _ in stacks]
    cpu = [0.0 for _ in stacks]
    for _ in range(rounds):
        for i, (port, pids) in enumerate(stacks):
            before = sum(cpu_s(pid) for pid in pids)
            ms[i] += latencies(port, "/v1/systemone", REQUEST, n // rounds)
            cpu[i] += sum(cpu_s(pid) for pid in pids) - before
    per_request = [c * 1000 / ((n // rounds + n // rounds // 5) * rounds) for c in cpu]
    return ms, per_request


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if q < 100 else max(values)


# ---------------------------------------------------------------------------- the stacks


class Stack:
    """A control plane, an ext_proc server and Envoy on one config whose member is ``upstream``."""

    def __init__(
        self, directory: Path, name: str, upstream: str, sidecar_cmd: list[str] | None, sidecar_port: int
    ) -> None:
        self.directory = directory / name
        self.directory.mkdir()
        self.port = free_port()
        config = self.directory / "config.yaml"
        config.write_text(f"""version: 2
deployments:
  d3: {{provider: systemone, endpoint: "{upstream}/v1/systemone", model: d3, schema: vllm-sr/5.0, max_concurrency: 256}}
listeners:
  - name: bench
    address: 127.0.0.1
    port: {self.port}
    apis:
      systemone: {{models: [d3], max_deadline_ms: 10000}}
""")
        self.settings = Settings(sidecar=Address("127.0.0.1", sidecar_port), admin=Address("127.0.0.1", free_port()))
        self.plane = ControlPlane(config, self.settings, host="127.0.0.1", port=0, status_port=0)
        self.plane.start()
        self.sidecar: subprocess.Popen[bytes] | None = None
        self.sidecar_port = sidecar_port
        if sidecar_cmd is not None:
            self.start_sidecar(sidecar_cmd)
        boot = self.directory / "bootstrap.yaml"
        boot.write_text(
            to_yaml(
                to_dict(
                    bootstrap(
                        Settings(
                            xds=Address("127.0.0.1", self.plane.port),
                            sidecar=self.settings.sidecar,
                            admin=self.settings.admin,
                        )
                    )
                )
            )
        )
        self.envoy = subprocess.Popen(
            [
                envoy_binary(),
                "-c",
                str(boot),
                "--base-id",
                str(free_port()),
                "--log-level",
                "error",
                "--concurrency",
                "2",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        wait_http(f"http://127.0.0.1:{self.settings.admin.port}/ready")
        self.wait_routes()

    def start_sidecar(self, args: list[str]) -> None:
        if self.sidecar is not None:
            self.sidecar.send_signal(signal.SIGTERM)
            self.sidecar.wait(30)
        status = free_port()
        cmd = [
            str(BIN / "vllm-sr"),
            "--log-level",
            "warning",
            "extproc",
            "serve",
            "--xds",
            f"127.0.0.1:{self.plane.port}",
            "--port",
            str(self.sidecar_port),
            "--status-port",
            str(status),
            *args,
        ]
        self.sidecar = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_http(f"http://127.0.0.1:{status}/healthz")

    def wait_routes(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                latencies(self.port, "/v1/systemone", REQUEST, 5)
                return
            except (RuntimeError, OSError):
                time.sleep(0.1)
        raise RuntimeError("the listener never answered")

    def stop(self) -> None:
        for proc in (self.envoy, self.sidecar):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        self.plane.stop()


def main() -> None:
    from sr_base import log

    log.configure("warning")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests per latency figure")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per throughput figure")
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    upstream_port, echo_port = free_port(), free_port()
    upstream = ctx.Process(target=canned_upstream, args=(upstream_port,), daemon=True)
    echo = ctx.Process(target=echo_extproc, args=(echo_port, "deployment/d3"), daemon=True)
    upstream.start()
    echo.start()
    wait_http(f"http://127.0.0.1:{upstream_port}/health")
    url = f"http://127.0.0.1:{upstream_port}"
    with tempfile.TemporaryDirectory(prefix="bench-extproc-") as tmp:
        directory = Path(tmp)
        bare = Stack(directory, "bare", url, None, echo_port)
        ours = Stack(directory, "ours", url, ["--forwarding", "envoy"], free_port())
        direct = Stack(directory, "direct", url, [], free_port())  # the default, auto: one host, so the sidecar calls
        try:
            n = args.requests
            assert ours.sidecar is not None and direct.sidecar is not None and echo.pid is not None
            stacks = [(bare.port, [echo.pid]), (ours.port, [ours.sidecar.pid]), (direct.port, [direct.sidecar.pid])]
            (bare_ms, ours_ms, direct_ms), (bare_cpu, ours_cpu, direct_cpu) = interleaved(stacks, n)
            direct.stop()
            print(
                f"4-question request through Envoy, {n} sequential requests (in 5 rounds, the three stacks "
                "taking turns, each after a warm-up); canned member"
            )
            print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
            print(
                f"{'':38s} {'p50 ms':>8s} {'p99 ms':>8s} {'p50 added':>10s} {'p99 added':>10s} "
                f"{'ext_proc CPU ms/req':>20s}"
            )
            rows = (
                ("bare ext_proc (names the cluster)", bare_ms, bare_cpu),
                ("sidecar, Envoy forwards", ours_ms, ours_cpu),
                ("sidecar calls the member (default)", direct_ms, direct_cpu),
            )
            for label, ms, cpu in rows:
                added = (
                    f"{'':10s} {'':10s}"
                    if ms is bare_ms
                    else f"{p(ms, 50) - p(bare_ms, 50):10.3f} {p(ms, 99) - p(bare_ms, 99):10.3f}"
                )
                print(f"{label:38s} {p(ms, 50):8.3f} {p(ms, 99):8.3f} {added} {cpu:20.3f}")
            print(f"target: at most {TARGET_ADDED_MS} ms p50 added over the bare ext_proc")
            print(
                "CPU the sidecar adds per request (a sequential client waits for it; load from outside "
                f"cannot inflate it much): {ours_cpu - bare_cpu:.3f} ms (Envoy forwards), "
                f"{direct_cpu - bare_cpu:.3f} ms (calls the member itself)"
            )

            print(
                "\n"
                f"throughput, 8 client processes on keep-alive connections, {args.seconds:.0f} s each (the "
                "sidecar on its default, --forwarding auto)"
            )
            print(f"  bare ext_proc:              {throughput(bare.port, args.seconds):8.0f} req/s")
            for workers in (1, 2):
                ours.start_sidecar(["--workers", str(workers)])  # the default forwarding: auto
                ours.wait_routes()
                print(
                    f"  sidecar, {workers} worker{'s' if workers > 1 else ' '}:          "
                    f"{throughput(ours.port, args.seconds):8.0f} req/s"
                )
        finally:
            for stack in (direct, ours, bare):
                stack.stop()
        whole_path(directory, args.requests // 4)
    upstream.terminate()
    echo.terminate()


def whole_path(directory: Path, n: int) -> None:
    """The listener in front of a real runtime, against calling the runtime directly."""
    from sr_runtime.presets import create

    folder = create(directory / "d3", "llama-prefix-bidir", seed=0)
    port = free_port()
    runtime = subprocess.Popen(
        [str(BIN / "vllm-srun"), "serve", str(folder), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", timeout=180)
        stack = Stack(directory, "runtime", f"http://127.0.0.1:{port}", [], free_port())
        try:
            direct = latencies(port, "/v1/systemone", REQUEST, n)
            listener = latencies(stack.port, "/v1/systemone", REQUEST, n)
        finally:
            stack.stop()
    finally:
        runtime.send_signal(signal.SIGTERM)
        runtime.wait(30)
    print(f"\nwhole path, tiny checkpoint, {n} sequential 4-question requests")
    print(f"  runtime directly:           p50 {p(direct, 50):7.3f} ms  p99 {p(direct, 99):7.3f} ms")
    print(
        f"  through the listener:       p50 {p(listener, 50):7.3f} ms  p99 {p(listener, 99):7.3f} ms  "
        f"({p(listener, 50) / p(direct, 50):.2f}x the runtime's p50)"
    )


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    main()
