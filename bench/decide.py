"""What the Decide path adds over Forward, measured through a real Envoy and sidecar.

    .venv/bin/python bench/decide.py [--requests 300] [--signals 1,4,16]

The same chat completion goes through the same listener to the same LLM upstream (a canned
OpenAI-compatible server in this process that answers at once) two ways:

- Forward: ``model: small-llm``, the sidecar reads ``model`` and names the provider's cluster;
- Decide: ``model: vllm-sr/decide-N``, a virtual model whose one route tests N noul signals,
  asked of a real ``vllm-srun serve`` on the tiny llama-prefix-bidir checkpoint in one call.

The decision model's own time is measured apart: the same System One request the sidecar sends
(``sr_control.decide.request.build_calls``, the vllm-sr/5.0 client codec), posted straight to
the runtime on a keep-alive connection. The three cases run in turns (a Forward request, a
direct decision-model call, a Decide request, again), so a busy machine weighs on them alike.
What the Decide path adds outside the decision model is then Decide - Forward - decision model,
round by round, and its percentiles (an estimate: the three are not the same requests). Then
each case alone, for the CPU time the sidecar and Envoy spend per request (``/proc``): the work
the Decide path adds, which a shared machine blurs far less than wall time. Decision-model calls
per request come from the runtime's ``/metrics``.

Prints figures and the target (<= 1 ms p50 added outside the decision model; 1 call per
request); never fails on time. Run it on a quiet machine: figures from a shared one mean little.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Run as `python bench/decide.py`, this file's folder leads sys.path; keep it from shadowing
# packages, and put the repository first: the test suite's parts (runtime, sidecar, Envoy) are used.
ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent)]

from sr_control.config.load import load_text  # noqa: E402
from sr_control.decide.request import build_calls, parts_of  # noqa: E402
from sr_control.decide.rules import compile_plan  # noqa: E402
from sr_runtime.presets import create  # noqa: E402
from systemone import REGISTRY, Policy, Target  # noqa: E402
from tests.decide.test_live import ChatUpstream  # noqa: E402
from tests.e2e.envoy_proc import free_port, wait_for  # noqa: E402
from tests.extproc.harness import Plane, Runtime, SidecarProc, envoy_for, get_text, metric  # noqa: E402

TARGET_ADDED_MS = 1.0
TEXT = "Our export service is down since this morning and the whole team is blocked."


def config(small: str, runtime: str, port: int, counts: list[int]) -> str:
    signals = "\n".join(
        f"  s{i}: {{type: noul, instructions: 'Is point {i} true of this request?'}}" for i in range(max(counts))
    )
    models = []
    for n in counts:
        tests = ", ".join(f"{{noul: s{i}, at_least: 0}}" for i in range(n))
        models.append(
            f"  vllm-sr/decide-{n}:\n    routes:\n      - {{name: all-{n}, when: {{all: [{tests}]}}, model: small-llm}}"
        )
    names = ", ".join([f"vllm-sr/decide-{n}" for n in counts] + ["small-llm", "big-llm"])
    return f"""version: 2
providers:
  models:
    - {{name: small-llm, api_format: chat_completions, endpoints: ["{small}/v1"]}}
    - {{name: big-llm, api_format: chat_completions, endpoints: ["{small}/v1"]}}
deployments:
  tiny: {{provider: systemone, endpoint: "{runtime}/v1/systemone", model: tiny, schema: vllm-sr/5.0}}
pools:
  vllm-sr/auto: {{members: [tiny]}}
signals:
{signals}
virtual_models:
{chr(10).join(models)}
listeners:
  - name: bench
    address: 127.0.0.1
    port: {port}
    apis:
      chat_completions: {{models: [{names}]}}
"""


def body(model: str) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": TEXT}]}).encode()


def interleaved(cases: list[tuple[int, str, bytes]], requests: int, warmup: int = 20) -> list[list[float]]:
    """Milliseconds per request of each case (port, path, body), one keep-alive connection
    each, one request at a time, the cases in turns: what else runs on the machine weighs on
    every case alike, so their differences mean more than their own figures."""
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for port, _, _ in cases]
    headers = {"content-type": "application/json"}
    out: list[list[float]] = [[] for _ in cases]
    for i in range(warmup + requests):
        for conn, (_, path, payload), times in zip(conns, cases, out, strict=True):
            start = time.perf_counter()
            conn.request("POST", path, body=payload, headers=headers)
            reply = conn.getresponse()
            reply.read()
            if reply.status != 200:
                raise SystemExit(f"{path}: {reply.status}")
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1000)
    for conn in conns:
        conn.close()
    return out


def cpu_ms(pid: int) -> float:
    """CPU time a process has used (user and system), in milliseconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def cpu_per_request(pids: list[int], port: int, payload: bytes, requests: int) -> list[float]:
    """Each process's CPU milliseconds per request of one case, run alone: work done, which a
    busy machine stretches far less than it stretches wall time."""
    before = [cpu_ms(p) for p in pids]
    interleaved([(port, "/v1/chat/completions", payload)], requests, warmup=0)
    return [(cpu_ms(p) - b) / requests for p, b in zip(pids, before, strict=True)]


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def decision_request(text: str, model: str, endpoint: str) -> tuple[str, bytes]:
    """The path and body the sidecar sends the runtime for ``model``'s signals."""
    cfg = load_text(text)
    plan = compile_plan(cfg).virtual_models[model]
    (call,) = build_calls(plan, parts_of("chat_completions", json.loads(body(model))))
    target = Target("vllm-sr/5.0", "tiny", (), 8, urlsplit(endpoint).path)
    wire = REGISTRY.client("vllm-sr/5.0").plan(call.request, target, Policy(call.deadline_ms)).calls[0]
    return wire.path, wire.body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--signals", default="1,4,16")
    args = parser.parse_args()
    counts = [int(n) for n in args.signals.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        checkpoint = create(directory / "tiny", "llama-prefix-bidir", seed=0)
        runtime = Runtime(checkpoint, directory / "runtime.log").start()
        upstream = ChatUpstream("small-llm")
        port, sidecar_port = free_port(), free_port()
        text = config(upstream.url, runtime.url, port, counts)
        parts: list[Any] = []
        try:
            runtime.wait()
            plane = Plane(directory, text, sidecar_port)
            parts.append(plane)
            sidecar = SidecarProc(directory, plane.port, port=sidecar_port).wait()
            parts.append(sidecar)
            envoy = envoy_for(directory, plane, sidecar_port)
            parts.append(envoy)
            wait_for(lambda: _listed(port, f"vllm-sr/decide-{counts[-1]}"), timeout=60, what="the listener to be ready")
            print(f"requests per case: {args.requests}; one connection each, one request at a time, cases in turns")
            rport = int(runtime.url.rsplit(":", 1)[1])
            chat = "/v1/chat/completions"
            for n in counts:
                model = f"vllm-sr/decide-{n}"
                path, payload = decision_request(text, model, runtime.url + "/v1/systemone")
                before = _calls(runtime)
                forward, own, decide = interleaved(
                    [(port, chat, body("small-llm")), (rport, path, payload), (port, chat, body(model))],
                    args.requests,
                )
                # The direct calls count too: the runtime counts every System One request.
                per_request = (_calls(runtime) - before) / (args.requests + 20) - 1
                # Per round: what this Decide request took beyond the Forward request and the
                # decision-model call beside it (paired, so a busy moment weighs on all three).
                added = [d - f - o for d, f, o in zip(decide, forward, own, strict=True)]
                pids = [sidecar.proc.pid, envoy.proc.pid]
                cpu_forward = cpu_per_request(pids, port, body("small-llm"), args.requests)
                cpu_decide = cpu_per_request(pids, port, body(model), args.requests)
                print(
                    f"{n:>2} signal(s): forward p50 {pct(forward, 50):.2f} ms, p99 {pct(forward, 99):.2f} ms; "
                    f"decide p50 {pct(decide, 50):.2f} ms, p99 {pct(decide, 99):.2f} ms; "
                    f"decision model alone p50 {pct(own, 50):.2f} ms, p99 {pct(own, 99):.2f} ms; "
                    f"added outside it p50 {pct(added, 50):.2f} ms, p99 {pct(added, 99):.2f} ms; "
                    f"decision-model calls per request {per_request:.2f}\n"
                    f"    CPU per request, forward -> decide: sidecar {cpu_forward[0]:.3f} -> {cpu_decide[0]:.3f} ms, "
                    f"Envoy {cpu_forward[1]:.3f} -> {cpu_decide[1]:.3f} ms"
                )
            print(f"target: added outside the decision model <= {TARGET_ADDED_MS} ms p50; 1 call per request")
        finally:
            for part in reversed(parts):
                part.stop()
            runtime.stop()
            upstream.stop()


def _listed(port: int, model: str) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/v1/models")
        reply = conn.getresponse()
        return reply.status == 200 and model in reply.read().decode()
    except OSError:
        return False


def _calls(runtime: Runtime) -> float:
    return metric(get_text(runtime.url + "/metrics"), "vsr_runtime_requests_total", endpoint="/v1/systemone")


if __name__ == "__main__":
    main()
