"""The runtime on one GPU: seed 001's latency table, throughput against a plain forward, bf16 against fp32.

One prepared script for one lent H200 (docs/runtime/gpu.md), in one run of under 8 minutes.
Weights are built at random in GPU memory (`Engine.load(..., random_init=SEED)` on a folder that
`presets.create(..., weights=False)` wrote: config and tokenizer only), never written to disk.
Two shapes of the `hybrid-prefix-bidir` preset:

- 1b: hidden 2048, 24 layers, the preset's own head counts (the issue-24 measurements' model).
- 27b: Qwen3.5-27B's published text dimensions (its model card): hidden 5120, 64 layers as 16 x
  (3 Gated DeltaNet + 1 full attention), MLP 17,408, full attention 24 query / 4 KV heads of 256,
  Gated DeltaNet 16 QK / 48 V heads of 128. The vocabulary is the preset's tiny one (so the
  embeddings are not 27B's 1.3B parameters; every layer is). The size of seed 001's d3-turbo.

Sections, most important first; each its own try/except (the error goes into the JSON and the run
goes on), each under a time cap, none started past the time budget:

  1b.throughput   answer_batch of 1, 8, 32 requests x 4 questions on distinct 512-token states,
                  against a plain bf16 forward over the same tokens (target: within 1.5x at 32)
  1b.fp32         bf16 against the fp32 reference path on a seeded corpus: decisions changed, max |dp|
  1b.state_once   2K x 16 and 8K x 4: state once vs the reference path vs a plain forward (the limit)
  27b.*           seed 001's latency rows beside its runtime (MI325X) and vLLM columns: 24K x 4,
                  16 questions, 64K x 2 and 117K x 2 with the long-context opt-in, 1, 4, 64
                  questions, 16 on a JSON state, a 255-option choice; then the plain forward over
                  24K tokens and throughput at 1, 8, 32 requests

Every section records torch.cuda.max_memory_allocated. Timings: torch.cuda.synchronize around
each call, the median of a few runs after a warm-up (one run, no warm-up, for 64K and 117K, as
seed 001). The JSON is rewritten after every section, so a run cut short keeps what it measured.

    PYTHONUNBUFFERED=1 python3 bench/gpu.py --out $OUT/gpu.json          (one H200: bench/gpu.sh)
    .venv/bin/python bench/gpu.py --device cpu --small --out /tmp/gpu.json   (seconds on CPU)
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import random
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from sr_runtime.engine import Engine
from sr_runtime.kernels import dtype_name, linear_attention_kernel
from sr_runtime.presets import CORPUS, create
from sr_runtime.prompt import encode_prompts
from sr_runtime.types import ChoiceQuestion, DecisionRequest, NoulQuestion, Question, Result, ScoreQuestion

PRESET = "hybrid-prefix-bidir"
SEED = 0
K = 1024

# Qwen3.5-27B's text model, from its model card (hidden 5120, 64 layers, 16 x (3 x Gated DeltaNet
# + 1 x gated attention), FFN 17,408; attention 24 Q / 4 KV heads of 256; DeltaNet 16 QK / 48 V
# heads of 128). transformers 5.17's Qwen3_5TextConfig defaults are the 9B's, so they are spelled here.
QWEN35_27B = {
    "intermediate_size": 17408,
    "num_attention_heads": 24,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 48,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
}
# The same proportions at --small's width, so the small run patches the config the same way.
QWEN35_27B_SMALL = {
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 6,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
}

# Seed 001, one AMD Instinct MI325X per side: the checkpoint's own runtime (in process) and vLLM
# (over HTTP), ms, p50 of 3 runs after a warm-up (1 run for 64K-117K).
SEED_001 = {
    "1 text question": ("60-61", "30-35"),
    "4 text questions": ("77-107", "58-85"),
    "16 text questions": ("176-242", "225-271"),
    "16 questions, JSON state": ("218", "376"),
    "64 text questions": ("756", "810"),
    "255-option choice": ("398", "370"),
    "24K-token state, 4 questions": ("3,579", "24,862"),
    "64K-token state, 2 questions": ("10,574", "55,449"),
    "117K-token state, 2 questions": ("26,275", "168,277"),
}
TARGETS = {"16 text questions": 150.0, "24K-token state, 4 questions": 3000.0}  # ms, issue 24


@dataclass(frozen=True)
class Sizes:
    """Token counts and repeats: the H200's, or --small's for a CPU (same code path)."""

    one_b: tuple[int, int]  # hidden, layers
    big: tuple[int, int]
    big_dims: dict[str, int]
    short: int  # seed 001's text states and the throughput states
    state_2k: int
    state_8k: int
    long: dict[str, int]  # 24K, 64K, 117K
    validated_length: int  # past it, only with the long-context opt-in
    max_length: int
    corpus_states: tuple[int, ...]
    repeats: int
    budget_s: float
    big_counts: tuple[int, ...] = (1, 8, 32)  # 27b throughput: requests per answer_batch


FULL = Sizes(
    one_b=(2048, 24),
    big=(5120, 64),
    big_dims=QWEN35_27B,
    short=512,
    state_2k=2 * K,
    state_8k=8 * K,
    long={"24K": 24 * K, "64K": 64 * K, "117K": 117 * K},
    validated_length=32 * K,  # d3-turbo's validated_length
    max_length=128 * K,  # seed 001's --max-model-len 131072
    corpus_states=(64, 256, 512, 2 * K),
    repeats=3,
    budget_s=450,
)
SMALL = Sizes(
    one_b=(64, 4),
    big=(128, 4),
    big_dims=QWEN35_27B_SMALL,
    short=48,
    state_2k=128,
    state_8k=256,
    # The 255-option question block is about 2,800 tokens, so the validated length stays above it.
    long={"24K": 256, "64K": 3200, "117K": 3584},
    validated_length=3000,
    max_length=4 * K,
    corpus_states=(32, 96),
    repeats=1,
    budget_s=120,
    big_counts=(1, 8),
)


class SectionTimeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise SectionTimeout("past the section's time cap")


# -- timing and memory ----------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# When the running section's time cap ends (time.monotonic()): timed() cuts its repeats to fit.
SECTION_ENDS = [float("inf")]


@dataclass(frozen=True)
class Timing:
    ms: float  # the median
    runs: int  # 0: the warm-up run alone (compilation and autotuning included)
    result: Any


def timed(device: torch.device, call: Callable[[], Any], repeats: int, warm: int = 1) -> Timing:
    """Median wall ms of `repeats` calls after `warm` untimed ones; fewer calls when that many
    would not end inside the section's time cap (by the slowest call so far)."""
    result = None
    slowest = 0.0
    for _ in range(warm):
        sync(device)
        start = time.perf_counter()
        result = call()
        sync(device)
        slowest = max(slowest, time.perf_counter() - start)
    if warm and time.monotonic() + 1.2 * slowest > SECTION_ENDS[0]:
        return Timing(slowest * 1000, 0, result)  # no time for another: the warm-up's time, runs 0 says so
    times: list[float] = []
    for _ in range(repeats):
        if times and time.monotonic() + 1.2 * slowest > SECTION_ENDS[0]:
            break
        sync(device)
        start = time.perf_counter()
        result = call()
        sync(device)
        times.append(time.perf_counter() - start)
        slowest = max(slowest, times[-1])
    return Timing(statistics.median(times) * 1000, len(times), result)


def gib(n: int) -> float:
    return round(n / 2**30, 2)


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# -- checkpoints and engines ----------------------------------------------------------------------


def checkpoint(root: Path, name: str, hidden: int, layers: int, dims: dict[str, int] | None, sizes: Sizes) -> Path:
    """The preset's config and tokenizer (no weight files), its lengths raised to seed 001's
    --max-model-len and d3-turbo's validated_length, and for 27b Qwen3.5-27B's head counts."""
    path = create(root / name, PRESET, SEED, hidden=hidden, layers=layers, weights=False)
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = sizes.max_length
    if dims is not None:
        config.update(dims)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    decision = json.loads((path / "decision_config.json").read_text())
    decision["max_length"] = sizes.max_length
    decision["validated_length"] = sizes.validated_length
    (path / "decision_config.json").write_text(json.dumps(decision, indent=2))
    return path


def load(path: Path, dtype: str) -> Engine:
    """The engine, its weights made at random on the device (float32, then cast: the same seed
    gives the same weights in every dtype, rounded); no state cache, so every state is computed."""
    return Engine.load(
        path,
        device=ARGS.device,
        dtype=dtype,
        random_init=SEED,
        max_model_len=ARGS.sizes.max_length,
        state_cache_bytes=0,
    )


def reference_of(engine: Engine) -> Engine:
    """The reference path (each question one whole forward, dense mask) on the same weights."""
    return Engine(
        engine.name,
        engine.checkpoint,
        engine.backbone,
        engine.readout,
        max_model_len=engine.max_length,
        state_cache_bytes=0,
        reference=True,
        vision=engine.vision,
        heads=engine.heads,
    )


def parameters(engine: Engine) -> int:
    return sum(p.numel() for p in engine.backbone.model.parameters())


def billions(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M"


# -- requests -------------------------------------------------------------------------------------


def tokens_of(engine: Engine, state: Any) -> int:
    return len(engine.checkpoint.tokenizer.encode("".join(engine.layout.state_parts(state))).ids)


def sized_text(engine: Engine, tokens: int, seed: int) -> str:
    """Shuffled corpus words whose state block holds about `tokens` tokens (within 0.5%)."""
    rng = random.Random(seed)
    words = CORPUS.split()
    pool: list[str] = []

    def text(n: int) -> str:
        while len(pool) < n:
            pool.extend(rng.sample(words, len(words)))
        return " ".join(pool[:n])

    n = max(1, tokens // 3)
    for _ in range(8):
        got = tokens_of(engine, text(n))
        if abs(got - tokens) <= max(2, tokens // 200):
            break
        n = max(1, round(n * tokens / got))
    return text(n)


def json_state(engine: Engine, tokens: int, seed: int) -> dict[str, Any]:
    """A JSON object state (a ticket, its history, the account) of about `tokens` tokens."""
    rng = random.Random(seed)
    lines = CORPUS.splitlines()
    state: dict[str, Any] = {"ticket": lines[0], "history": [], "account": {"plan": "business", "seats": 12}}
    while tokens_of(engine, state) < tokens:
        state["history"].append({"from": rng.choice(["customer", "agent"]), "text": rng.choice(lines)})
    return state


def questions(n: int, offset: int = 0) -> tuple[Question, ...]:
    kinds: list[Callable[[int], Question]] = [
        lambda i: NoulQuestion(f"Does message {i} report a problem that blocks the user's work?"),
        lambda i: ChoiceQuestion(
            (
                ("billing", "Payments, invoices and refunds"),
                ("engineering", "Outages, errors and bugs"),
                ("other", None),
            ),
            f"Which team should handle request {i}?",
        ),
        lambda i: ScoreQuestion(("calm", "annoyed", "angry", "furious"), f"How angry is customer {i}?"),
    ]
    return tuple(kinds[(i + offset) % 3](i + offset) for i in range(n))


def many_options(n: int) -> ChoiceQuestion:
    return ChoiceQuestion(tuple((f"queue {i}", None) for i in range(n)), "Which queue should this ticket go to?")


def check(results: list[Result]) -> int:
    """Questions answered (an error in place of an answer fails the row)."""
    errors = [a for r in results for a in r.answers if hasattr(a, "code")]
    if errors:
        raise RuntimeError(f"{len(errors)} questions unanswered, first: {errors[0]}")
    return sum(len(r.answers) for r in results)


def probabilities(answer: Any) -> list[float]:
    if hasattr(answer, "noul"):
        return [1 - answer.noul, answer.noul]
    if hasattr(answer, "choice"):
        return [p for _, p in answer.probabilities]
    return list(answer.probabilities)


def decision(p: list[float]) -> tuple[int, float]:
    """The decision (noul >= 0.5, the top choice, a score's most likely level) and its margin
    over the runner-up."""
    order = sorted(range(len(p)), key=lambda i: -p[i])
    return order[0], p[order[0]] - p[order[1]]


# -- the sections ---------------------------------------------------------------------------------


def plain_forward(engine: Engine, rows: int, width: int, repeats: int | None = None) -> float:
    """ms of one plain forward of the engine's own model over [rows, width] tokens: causal, no
    cache, no readout; the time the same tokens take with nothing of the runtime around them."""
    model = engine.backbone.model
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (rows, width), device=engine.backbone.device)

    @torch.inference_mode()
    def call() -> None:
        model.base_model(input_ids=ids, use_cache=False)

    return timed(engine.backbone.device, call, repeats or ARGS.sizes.repeats).ms


def throughput(engine: Engine, out: dict[str, Any], counts: tuple[int, ...] = (1, 8, 32)) -> dict[str, Any]:
    """answer_batch of N requests (what the server's scheduler hands the engine at once) x 4
    questions on distinct states, against a plain forward of [N, the longest request's tokens].
    Fills `out` as it goes (a section cut short keeps the counts it measured)."""
    n_questions = 4
    states = [sized_text(engine, ARGS.sizes.short, seed=1000 + i) for i in range(max(counts))]
    out |= {"state_tokens": ARGS.sizes.short, "questions_per_request": n_questions}
    for n in counts:
        requests = [DecisionRequest(states[i], questions(n_questions, offset=i)) for i in range(n)]
        timing = timed(engine.backbone.device, partial(engine.answer_batch, requests), ARGS.sizes.repeats)
        ms, results = timing.ms, timing.result
        check(results)
        width = max(r.usage.input_tokens for r in results)
        plain = plain_forward(engine, n, width)
        out[str(n)] = {
            "ms": round(ms, 1),
            "requests_per_s": round(n / ms * 1000, 2),
            "questions_per_s": round(n * n_questions / ms * 1000, 1),
            "tokens_per_request": width,
            "plain_forward_ms": round(plain, 1),
            "vs_plain": round(ms / plain, 2),
        }
        print(f"  {n:>2} requests: {ms:9.1f} ms, plain forward {n} x {width} tokens {plain:8.1f} ms: {ms / plain:.2f}x")
    return out


def corpus(engine: Engine) -> list[DecisionRequest]:
    """Seeded like seed 001's text set: states of several sizes with 1, 4 and 16 questions, a
    16-question JSON state, a 40-option and a 255-option choice."""
    out = [
        DecisionRequest(sized_text(engine, size, seed=size + n), questions(n, offset=size))
        for size in ARGS.sizes.corpus_states
        for n in (1, 4, 16)
    ]
    out.append(DecisionRequest(json_state(engine, ARGS.sizes.short, seed=7), questions(16, offset=5)))
    short = sized_text(engine, ARGS.sizes.short, seed=40)
    out += [DecisionRequest(short, (many_options(40),)), DecisionRequest(short, (many_options(255),))]
    return out


def weights(engine: Engine) -> list[tuple[str, torch.Tensor]]:
    return [*engine.backbone.model.named_parameters(), ("readout", engine.readout)]


def same_weights(ours: Engine, fp32: Engine) -> bool:
    """Whether each of our tensors is the fp32 engine's, rounded to our dtype."""
    return all(
        name == name32 and torch.equal(w, w32.to(w.dtype))
        for (name, w), (name32, w32) in zip(weights(ours), weights(fp32), strict=True)
    )


def fp32_check(engine: Engine, path: Path) -> dict[str, Any]:
    """This engine (bf16) against the fp32 reference path on the same weights: decisions changed,
    |dp| (the largest probability difference over a question's options); seed 001's bar: max 0.03."""
    e32 = load(path, "float32")
    try:
        # Else the comparison would measure two draws of the seed, not the dtype.
        same = same_weights(engine, e32)
        requests = corpus(engine)
        reference = reference_of(e32)
        ref = [reference.answer(r) for r in requests]
        ours = [engine.answer(r) for r in requests]
        once32 = [e32.answer(r) for r in requests]
        n = check(ref)
        check(ours), check(once32)
    finally:
        del e32
        free(engine.backbone.device)
    dps, changed, sanity = [], [], 0.0
    for r, o, s in zip(ref, ours, once32):
        for a, b, c in zip(r.answers, o.answers, s.answers):
            pa, pb, pc = probabilities(a), probabilities(b), probabilities(c)
            dps.append(max(abs(x - y) for x, y in zip(pa, pb)))
            sanity = max(sanity, max(abs(x - y) for x, y in zip(pa, pc)))
            (da, margin), (db, _) = decision(pa), decision(pb)
            if da != db:
                changed.append(round(margin, 4))
    out = {
        "engine_dtype": dtype_name(engine.dtype),
        "weights_match": same,
        "questions": n,
        "requests": len(requests),
        "decisions_changed": len(changed),
        "reference_margins_of_changed": changed,
        "median_dp": round(statistics.median(dps), 5),
        "p90_dp": round(sorted(dps)[int(0.9 * (len(dps) - 1))], 5),
        "max_dp": round(max(dps), 5),
        "fp32_state_once_vs_reference_max_dp": float(f"{sanity:.2e}"),
    }
    print(
        f"  {n} questions: {len(changed)} decisions changed (reference margins {changed}), "
        f"max |dp| {out['max_dp']}, median {out['median_dp']}; weights match: {same}"
    )
    return out


def state_once(engine: Engine, out: dict[str, Any]) -> dict[str, Any]:
    """State once vs the reference path vs a plain forward over the tokens each reads (fills `out`)."""
    reference = reference_of(engine)
    for label, size, n in (("2K x 16", ARGS.sizes.state_2k, 16), ("8K x 4", ARGS.sizes.state_8k, 4)):
        request = DecisionRequest(sized_text(engine, size, seed=size), questions(n))
        device = engine.backbone.device
        once = timed(device, partial(engine.answer, request), ARGS.sizes.repeats)
        whole = timed(device, partial(reference.answer, request), ARGS.sizes.repeats)
        (fast, a), (slow, b) = (once.ms, once.result), (whole.ms, whole.result)
        dp = max(abs(x - y) for p, q in zip(a.answers, b.answers) for x, y in zip(probabilities(p), probabilities(q)))
        block = "".join(engine.layout.state_parts(request.state))
        prompts = encode_prompts(
            engine.checkpoint.tokenizer,
            block,
            [engine.layout.question_block(q, engine.config.codes) for q in request.questions],
        )
        s, qs = len(prompts[0].state), [len(p.question) for p in prompts]
        once = plain_forward(engine, 1, s + sum(qs))  # the tokens state once reads
        each = plain_forward(engine, n, s + max(qs))  # the tokens the reference path reads
        out[label] = {
            "state_tokens": s,
            "question_tokens": sum(qs),
            "state_once_ms": round(fast, 1),
            "reference_ms": round(slow, 1),
            "speed_up": round(slow / fast, 2),
            "token_limit": round(sum(s + q for q in qs) / (s + sum(qs)), 2),
            "plain_forward_once_ms": round(once, 1),
            "plain_forward_per_question_ms": round(each, 1),
            "vs_plain": round(fast / once, 2),
            "max_dp_vs_reference": float(f"{dp:.2e}"),
        }
        print(
            f"  {label}: state once {fast:.1f} ms, reference {slow:.1f} ms ({slow / fast:.1f}x), "
            f"plain forward 1 x {s + sum(qs)} {once:.1f} ms / {n} x {s + max(qs)} {each:.1f} ms"
        )
    return out


def latency(engine: Engine, row: str, make: Callable[[], DecisionRequest], repeats: int, warm: int) -> dict[str, Any]:
    """One of seed 001's rows: its request (made inside the section, so its cap covers the
    tokenizing too) answered one at a time."""
    request = make()
    timing = timed(engine.backbone.device, partial(engine.answer, request), repeats, warm)
    ms, result = timing.ms, timing.result
    n = check([result])
    runtime, vllm = SEED_001[row]
    out: dict[str, Any] = {
        "ms": round(ms, 1),
        "runs": timing.runs,
        "warm_up_runs": warm,
        "questions": n,
        "input_tokens": result.usage.input_tokens,
        "seed_runtime_ms": runtime,
        "seed_vllm_ms": vllm,
    }
    if row in TARGETS:
        out["target_ms"] = TARGETS[row]
    print(f"  {row}: {ms:.1f} ms ({result.usage.input_tokens} tokens; seed 001: runtime {runtime}, vLLM {vllm})")
    return out


def profile(engine: Engine, make: Callable[[], DecisionRequest]) -> dict[str, Any]:
    """Where one request's time goes: the device's busy time against the wall, kernels launched,
    and the kernels that take most of it (torch.profiler, after the row's own warm-up)."""
    request = make()
    engine.answer(request)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if engine.backbone.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sync(engine.backbone.device)
    began = time.perf_counter()
    with torch.profiler.profile(activities=activities) as prof:
        engine.answer(request)
        sync(engine.backbone.device)
    wall_ms = (time.perf_counter() - began) * 1000
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name: dict[str, float] = {}
    for e in kernels:
        by_name[e.name] = by_name.get(e.name, 0.0) + e.device_time / 1000
    busy_ms = sum(by_name.values())
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:12]
    out = {
        "wall_ms": round(wall_ms, 1),
        "device_busy_ms": round(busy_ms, 1),
        "kernels_launched": len(kernels),
        "top_kernels_ms": {name[:100]: round(ms, 1) for name, ms in top},
    }
    print(f"  profile: wall {wall_ms:.0f} ms, device busy {busy_ms:.0f} ms, {len(kernels)} kernels")
    for name, ms in top:
        print(f"    {ms:8.1f} ms  {name[:90]}")
    return out


def passes(engine: Engine, make: Callable[[], DecisionRequest]) -> dict[str, Any]:
    """A cold request's two ways through the backbone, on its own tokens: the state pass then the
    question pass (what a request took before sr_runtime/one_pass.py, and what a request too big
    for one pass still takes) against both in one pass (what the engine does where they fit)."""
    request = make()
    backbone, mode, budget = engine.backbone, engine.config.attention_mode, engine.token_budget
    prompts = encode_prompts(
        engine.checkpoint.tokenizer,
        "".join(engine.layout.state_parts(request.state)),
        [engine.layout.question_block(q, engine.config.codes) for q in request.questions],
    )
    state, rows = prompts[0].state, [p.question for p in prompts]

    def two() -> torch.Tensor:
        return backbone.question_rows([backbone.prefill(state, mode)] * len(rows), rows, mode, budget)

    device = backbone.device
    split = timed(device, two, ARGS.sizes.repeats)
    one = timed(device, partial(backbone.state_and_questions, state, rows, mode, budget), ARGS.sizes.repeats)
    # The same rows both ways, to the dtype's rounding: the one pass checked on this device.
    apart = (one.result[1].float() - split.result.float()).abs().max().item()
    scale = split.result.float().abs().max().item()
    out = {
        "state_tokens": len(state),
        "question_tokens": sum(len(r) for r in rows),
        "two_passes_ms": round(split.ms, 1),
        "one_pass_ms": round(one.ms, 1),
        "max_abs_diff_of_rows": float(f"{apart:.3e}"),
        "max_abs_row_value": float(f"{scale:.3e}"),
    }
    print(
        f"  {len(rows)} questions on {len(state)} tokens: two passes {split.ms:.1f} ms, one pass {one.ms:.1f} ms; "
        f"rows apart by at most {apart:.2e} (largest value {scale:.2e})"
    )
    return out


def attention_kernels(engine: Engine, tokens: int) -> dict[str, Any]:
    """A state block's attention at this shape's heads over `tokens` tokens, per SDPA backend:
    non-causal (a prefix_bidir state) on each kernel that takes it, against causal flash (what a
    plain forward pays). Which kernel the next change should pick; an error is recorded as such."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    config = engine.backbone.config
    heads, kv_heads, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    device, dtype = engine.backbone.device, engine.dtype
    q = torch.randn(1, heads, tokens, d, device=device, dtype=dtype)
    k, v = (torch.randn(1, kv_heads, tokens, d, device=device, dtype=dtype) for _ in range(2))
    wide_k, wide_v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
    out: dict[str, Any] = {"tokens": tokens, "heads": heads, "kv_heads": kv_heads, "head_dim": d}
    cases = [
        ("flash causal", SDPBackend.FLASH_ATTENTION, True, False),
        ("flash", SDPBackend.FLASH_ATTENTION, False, False),
        ("flash, enable_gqa", SDPBackend.FLASH_ATTENTION, False, True),
        ("cudnn", SDPBackend.CUDNN_ATTENTION, False, False),
        ("efficient", SDPBackend.EFFICIENT_ATTENTION, False, False),
    ]
    for label, backend, causal, gqa in cases:

        def call(backend: SDPBackend = backend, causal: bool = causal, gqa: bool = gqa) -> None:
            with sdpa_kernel([backend]):
                keys, values = (k, v) if gqa else (wide_k, wide_v)
                torch.nn.functional.scaled_dot_product_attention(q, keys, values, is_causal=causal, enable_gqa=gqa)

        try:
            out[f"{label} ms"] = round(timed(device, call, ARGS.sizes.repeats).ms, 2)
        except Exception as exc:  # a backend this build or this head dim does not take
            out[f"{label} ms"] = f"{type(exc).__name__}: {exc}"[:200]
        print(f"  {label}: {out[f'{label} ms']}")
    return out


# -- the run --------------------------------------------------------------------------------------
# -- the run --------------------------------------------------------------------------------------


class Run:
    """Sections in order under one time budget; the report is rewritten after each."""

    def __init__(self, out: Path, sizes: Sizes) -> None:
        self.start = time.monotonic()
        self.out = out
        self.sizes = sizes
        self.device = torch.device(ARGS.device)
        self.report: dict[str, Any] = {"meta": meta(sizes), "sections": {}}

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def section(
        self,
        name: str,
        call: Callable[[], Any],
        cap: float,
        latest_start: float | None = None,
        keep: dict[str, Any] | None = None,
    ) -> Any:
        """Run one section; its result, or None when it failed or was skipped (recorded either way).
        `keep`: the dict the section fills as it goes, reported even when it fails part way."""
        entry: dict[str, Any] = {}
        self.report["sections"][name] = entry
        now = self.elapsed()
        limit = self.sizes.budget_s if latest_start is None else min(latest_start, self.sizes.budget_s)
        if now > limit:
            entry.update(status="skipped", reason=f"started past {limit:.0f} s of the run's time budget")
            print(f"[{now:6.1f} s] {name}: skipped (past {limit:.0f} s)")
            self.save()
            return None
        # Never past the budget plus a grace, so the run ends inside the caller's timeout.
        cap = max(1.0, min(cap, self.sizes.budget_s + 30 - now))
        print(f"[{now:6.1f} s] {name} (cap {cap:.0f} s)")
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            entry["allocated_before_gib"] = gib(torch.cuda.memory_allocated(self.device))
        began = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, cap)
        SECTION_ENDS[0] = time.monotonic() + cap
        result = None
        try:
            result = call()
            entry["status"] = "ok"
            if isinstance(result, dict):
                entry["result"] = result
        except (Exception, SectionTimeout) as exc:
            entry["status"] = "error"
            entry["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            entry["traceback"] = traceback.format_exc(limit=-6)[-4000:]
            print(f"  ERROR {entry['error'][:400]}")
            if keep:
                entry["result"] = keep
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            SECTION_ENDS[0] = float("inf")
        free(self.device)  # what a failed section held, and the allocator's cache between sections
        entry["seconds"] = round(time.perf_counter() - began, 1)
        if self.device.type == "cuda":
            entry["peak_gib"] = gib(torch.cuda.max_memory_allocated(self.device))
        self.save()
        return result

    def save(self) -> None:
        self.report["meta"]["elapsed_s"] = round(self.elapsed(), 1)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.report, indent=2) + "\n")
        tmp.replace(self.out)


def linear_attention_kernels() -> dict[str, str]:
    """Which implementation transformers' Qwen3.5 layers call for each linear-attention step: the
    package's kernel (fla, causal_conv1d) when it imported, else the torch reference path."""
    from transformers.models.qwen3_5 import modeling_qwen3_5

    out = {}
    for name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn"):
        fn = getattr(modeling_qwen3_5, name, None)
        cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ()))) if fn else {}
        impl = cells.get("implementation")
        out[name] = f"{impl.__module__}.{impl.__name__}" if callable(impl) else "unknown"
    return out


def meta(sizes: Sizes) -> dict[str, Any]:
    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    device = torch.device(ARGS.device)
    info: dict[str, Any] = {
        "device": ARGS.device,
        "small": ARGS.small,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": version("transformers"),
        "flash_linear_attention": version("flash-linear-attention"),
        "fla_importable": importlib.util.find_spec("fla") is not None,
        "transformers_linear_attention": linear_attention_kernels(),
        "runtime_linear_attention": linear_attention_kernel(device),
        "budget_s": sizes.budget_s,
        "validated_length": sizes.validated_length,
        "max_length": sizes.max_length,
        "shape_27b": "Qwen3.5-27B's published text dims (model card), the preset's tiny vocabulary",
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info |= {"gpu": props.name, "gpu_memory_gib": gib(props.total_memory), "cuda": torch.version.cuda}
    return info


def shape(
    run: Run, root: Path, name: str, hidden: int, layers: int, dims: dict[str, int] | None, section: str = ""
) -> Engine | None:
    """The shape's engine in bfloat16, built at random on the device (its own section)."""
    holder: list[Engine] = []

    def build() -> dict[str, Any]:
        path = checkpoint(root, name, hidden, layers, dims, run.sizes)
        start = time.perf_counter()
        holder.append(load(path, "bfloat16"))
        sync(run.device)
        engine = holder[0]
        kinds = list(engine.backbone.kinds)
        out = {
            "parameters": parameters(engine),
            "dtype": dtype_name(engine.dtype),
            "hidden": engine.backbone.config.hidden_size,
            "layers": len(kinds),
            "full_attention_layers": kinds.count("full_attention"),
            "load_s": round(time.perf_counter() - start, 1),
        }
        # Kernels compile and autotune for this shape's head counts on first use: here, not in
        # the first timed section's warm-up (a request with two questions, and a plain forward).
        start = time.perf_counter()
        check([engine.answer(DecisionRequest(sized_text(engine, run.sizes.short, seed=1), questions(2)))])
        plain_forward(engine, 1, run.sizes.short, repeats=1)
        out["first_use_s"] = round(time.perf_counter() - start, 1)
        print(
            f"  {billions(out['parameters'])} parameters, {out['dtype']}, {out['layers']} layers, "
            f"load {out['load_s']} s, first use {out['first_use_s']} s"
        )
        return out

    run.section(section or f"{name}.load", build, cap=150)
    return holder[0] if holder else None


def seed_001_rows(big: Engine, sizes: Sizes) -> list[tuple[str, Callable[[], DecisionRequest], bool, float]]:
    """Seed 001's latency rows in the order they run: (row, its request, long: one run without a
    warm-up, the section's cap in s). Text states are `sizes.short` tokens."""
    long = sizes.long

    def text(n: int, seed: int = 0) -> DecisionRequest:
        return DecisionRequest(sized_text(big, sizes.short, seed=n + seed), questions(n))

    def state(size: str, n: int) -> DecisionRequest:
        # Past the validated length (64K, 117K) only with the client's long-context opt-in.
        return DecisionRequest(
            sized_text(big, long[size], seed=n), questions(n), long_context=long[size] > sizes.validated_length
        )

    return [
        ("24K-token state, 4 questions", lambda: state("24K", 4), False, 80),
        ("16 text questions", lambda: text(16), False, 40),
        ("64K-token state, 2 questions", lambda: state("64K", 2), True, 90),
        ("117K-token state, 2 questions", lambda: state("117K", 2), True, 150),
        ("1 text question", lambda: text(1), False, 30),
        ("4 text questions", lambda: text(4), False, 30),
        ("64 text questions", lambda: text(64), False, 40),
        (
            "16 questions, JSON state",
            lambda: DecisionRequest(json_state(big, sizes.short, seed=16), questions(16)),
            False,
            40,
        ),
        ("255-option choice", lambda: DecisionRequest(text(1, seed=255).state, (many_options(255),)), False, 40),
    ]


def main() -> None:
    sizes = ARGS.sizes
    if ARGS.small and ARGS.device == "cpu":
        torch.set_num_threads(1)  # tiny shapes gain nothing from threads, and lose much on busy shared cores
    out = Path(ARGS.out or os.path.join(os.environ.get("OUT", "."), "gpu.json"))
    run = Run(out, sizes)
    print(f"# bench/gpu.py on {run.report['meta'].get('gpu', ARGS.device)}: {json.dumps(run.report['meta'])}")

    def stop(signum: int, frame: object) -> None:  # the caller's timeout: keep what was measured
        run.report["meta"]["stopped_by_signal"] = signum
        run.save()
        table(run.report)
        sys.exit(124)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, _alarm)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # The 1b targets first, but none of it past a third of the budget: the 27b shape must get its turn.
        engine = shape(run, root, "1b", *sizes.one_b, None)
        if engine is not None:
            one_b = engine
            until = sizes.budget_s / 3
            measured: dict[str, Any] = {}
            run.section("1b.throughput", lambda: throughput(one_b, measured), cap=60, latest_start=until, keep=measured)
            del engine, one_b
            free(run.device)

        engine = shape(run, root, "27b", *sizes.big, sizes.big_dims)
        if engine is not None:
            big = engine
            rows = seed_001_rows(big, sizes)
            for row, make, long, cap in rows:
                repeats, warm = (1, 0) if long else (sizes.repeats, 1)
                run.section(f"27b.{row}", partial(latency, big, row, make, repeats, warm), cap=cap)
                if row.startswith("24K"):  # its floor beside it: the same tokens through the bare model
                    run.section(
                        "27b.plain_forward_24K",
                        lambda: {"ms": round(plain_forward(big, 1, sizes.long["24K"]), 1)},
                        cap=40,
                    )
            long_row = next((r for r in rows if r[0].startswith("24K")), None)
            if long_row is not None:
                run.section("27b.profile_24K", partial(profile, big, long_row[1]), cap=40)
                run.section("27b.attention_kernels_24K", partial(attention_kernels, big, sizes.long["24K"]), cap=40)
            sixteen = next((r for r in rows if r[0] == "16 text questions"), None)
            if sixteen is not None:  # a small request: fixed cost, the one pass's gain and its kernels
                run.section("27b.passes_16", partial(passes, big, sixteen[1]), cap=30)
                run.section("27b.profile_16", partial(profile, big, sixteen[1]), cap=30)
            big_measured: dict[str, Any] = {}
            run.section(
                "27b.throughput", lambda: throughput(big, big_measured, sizes.big_counts), cap=90, keep=big_measured
            )
            del engine, big
            free(run.device)

        # Last: the 1b shape again (seconds to build) for the fp32 check and state once.
        engine = shape(run, root, "1b", *sizes.one_b, None, section="1b.reload")
        if engine is not None:
            again = engine
            # The fp32 reference answers each of its 102 questions with a whole fp32 forward: on the
            # H200 (e265248) that ran past a 60 s cap placed before the 27b shape, so it runs here.
            run.section("1b.fp32", lambda: fp32_check(again, root / "1b"), cap=150)
            compared: dict[str, Any] = {}
            run.section("1b.state_once", lambda: state_once(again, compared), cap=80, keep=compared)
            del engine, again
            free(run.device)
    run.report["meta"]["finished"] = True
    run.save()
    table(run.report)


def table(report: dict[str, Any]) -> None:
    """The compact table, printed last (the device tool returns the end of the output)."""
    sections = report["sections"]

    def get(name: str) -> dict[str, Any]:
        return sections.get(name, {}).get("result") or {}

    def status(name: str) -> str:
        entry = sections.get(name)
        if entry is None:
            return "not run"
        if entry["status"] == "ok":
            return ""
        return f"{entry['status']}: {entry.get('error', entry.get('reason', ''))[:70]}"

    def peak(name: str) -> str:
        value = sections.get(name, {}).get("peak_gib")
        return "" if value is None else f"{value}"

    lines = [("what", "ours", "target / seed runtime", "seed vLLM", "peak GiB")]
    for shape_name in ("1b", "27b"):
        load_ = get(f"{shape_name}.load")
        if load_:
            lines.append(
                (
                    f"{shape_name}: {billions(load_['parameters'])}, {load_['dtype']}",
                    f"load {load_['load_s']} s, first use {load_.get('first_use_s')} s",
                    "",
                    "",
                    peak(f"{shape_name}.load"),
                )
            )
        elif status(f"{shape_name}.load"):
            lines.append((f"{shape_name}.load", status(f"{shape_name}.load"), "", "", ""))
    tp = get("1b.throughput")
    for n in ("1", "8", "32"):
        if n in tp:
            r = tp[n]
            lines.append(
                (
                    f"1b answer_batch {n} x 4q",
                    f"{r['ms']} ms = {r['vs_plain']}x plain {r['plain_forward_ms']}",
                    "<= 1.5x plain" if n == "32" else "",
                    "",
                    peak("1b.throughput") if n == "32" else "",
                )
            )
    if status("1b.throughput"):
        lines.append(("1b.throughput", status("1b.throughput"), "", "", ""))
    fp = get("1b.fp32")
    if fp:
        lines.append(
            (
                f"1b {fp['engine_dtype']} vs fp32 reference",
                f"{fp['decisions_changed']}/{fp['questions']} changed (reference margins "
                f"{fp['reference_margins_of_changed']}), max |dp| {fp['max_dp']}",
                "0 changed, <= 0.03",
                "",
                peak("1b.fp32"),
            )
        )
    elif status("1b.fp32"):
        lines.append(("1b.fp32", status("1b.fp32"), "", "", ""))
    for label, r in get("1b.state_once").items():
        lines.append(
            (
                f"1b {label}: once / ref / plain",
                f"{r['state_once_ms']} / {r['reference_ms']} / {r['plain_forward_once_ms']} ms",
                f"limit {r['token_limit']}x",
                "",
                peak("1b.state_once"),
            )
        )
    if status("1b.reload"):
        lines.append(("1b.reload", status("1b.reload"), "", "", ""))
    if status("1b.state_once"):
        lines.append(("1b.state_once", status("1b.state_once"), "", "", ""))
    for row, (runtime, vllm) in SEED_001.items():
        name = f"27b.{row}"
        r = get(name)
        target = f"<= {TARGETS[row]:.0f} / " if row in TARGETS else ""
        ours = (
            f"{r['ms']} ms" + (" (warm-up run only)" if r.get("runs") == 0 else "") if r else status(name) or "not run"
        )
        lines.append((f"27b {row}", ours, f"{target}{runtime}", vllm, peak(name)))
    plain = get("27b.plain_forward_24K")
    if plain:
        lines.append(("27b plain forward 1 x 24K", f"{plain['ms']} ms", "", "", peak("27b.plain_forward_24K")))
    prof = get("27b.profile_24K")
    if prof:
        lines.append(
            (
                "27b 24K x 4q profiled",
                f"wall {prof['wall_ms']} ms, device busy {prof['device_busy_ms']} ms, "
                f"{prof['kernels_launched']} kernels",
                "",
                "",
                "",
            )
        )
    att = get("27b.attention_kernels_24K")
    if att:
        times = ", ".join(f"{k.removesuffix(' ms')} {v}" for k, v in att.items() if k.endswith(" ms"))
        lines.append(("27b state attention 24K, ms", times[:110], "", "", ""))
    two = get("27b.passes_16")
    if two:
        lines.append(
            (
                "27b 16q: two passes / one",
                f"{two['two_passes_ms']} / {two['one_pass_ms']} ms, rows apart <= {two['max_abs_diff_of_rows']} "
                f"(of {two['max_abs_row_value']})",
                "",
                "",
                "",
            )
        )
    prof = get("27b.profile_16")
    if prof:
        lines.append(
            (
                "27b 16q profiled",
                f"wall {prof['wall_ms']} ms, device busy {prof['device_busy_ms']} ms, "
                f"{prof['kernels_launched']} kernels",
                "",
                "",
                "",
            )
        )
    tp = get("27b.throughput")
    for n in ("1", "8", "32"):
        if n in tp:
            lines.append((f"27b answer_batch {n} x 4q", f"{tp[n]['requests_per_s']} req/s", "", "", ""))
    widths = [max(len(str(line[i])) for line in lines) for i in range(5)]
    print(f"\n# bench/gpu.py: {report['meta'].get('gpu', report['meta']['device'])}, {report['meta']['elapsed_s']} s")
    for line in lines:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip())


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="tiny shapes and few repeats: seconds on a CPU")
    parser.add_argument("--out", default=None, help="the JSON report (default: $OUT/gpu.json)")
    parser.add_argument("--budget", type=float, default=None, help="seconds after which no section starts")
    args = parser.parse_args()
    sizes = SMALL if args.small else FULL
    if args.budget is not None:
        sizes = Sizes(**{**sizes.__dict__, "budget_s": args.budget})
    args.sizes = sizes
    return args


if __name__ == "__main__":
    ARGS = parse()
    main()
