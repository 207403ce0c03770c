"""Kernel choices (sr_runtime/kernels.py): state passes without a dense mask, several states in
one pass, and attention with its log-sum-exp; the CUDA checks run only where a GPU is."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from sr_runtime.engine import Engine
from sr_runtime.kernels import (
    aligned_bias,
    attend,
    batch_state_prefills,
    default_token_budget,
    linear_attention_kernel,
    plain_attend,
)
from sr_runtime.presets import CORPUS
from sr_runtime.request import read
from sr_runtime.server import ServerSettings
from sr_runtime.server.bridge import to_engine
from sr_runtime.types import DecisionRequest
from tests.runtime import test_media
from tests.runtime.test_engine import QUESTIONS, TOLERANCE, max_dp

LINES = CORPUS.splitlines()
# Distinct states of distinct lengths, as concurrent requests bring them.
REQUESTS = [DecisionRequest(" ".join(LINES[i : i + 1 + 2 * i]), QUESTIONS[i % 3 : i % 3 + 3]) for i in range(6)]


@contextmanager
def sdpa_masks() -> Iterator[list[tuple[int, ...] | None]]:
    """The shape of every mask SDPA is given while the block runs (None: no mask)."""
    seen: list[tuple[int, ...] | None] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: Any, attn_mask: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        seen.append(None if attn_mask is None else tuple(attn_mask.shape))
        return sdpa(*args, attn_mask=attn_mask, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = spy  # type: ignore[assignment]
    try:
        yield seen
    finally:
        torch.nn.functional.scaled_dot_product_attention = sdpa


@pytest.mark.parametrize("preset", ["hybrid-prefix-bidir", "llama-prefix-bidir", "hybrid-causal"])
def test_a_state_pass_gives_attention_no_mask(engines: dict[str, Engine], preset: str) -> None:
    """The state block reads itself both ways (causally under causal) through SDPA's own flags:
    nothing of [S, S] is made, so memory stays linear in the state."""
    engine = engines[preset]
    ids = engine.checkpoint.tokenizer.encode(" ".join(LINES)).ids
    with sdpa_masks() as seen:
        engine.backbone.prefill(ids, engine.config.attention_mode)
    assert seen and all(mask is None for mask in seen)


def test_whole_noncausal_prompts_give_attention_a_key_bias_not_a_mask(
    engines: dict[str, Engine], references: dict[str, Engine]
) -> None:
    """Under noncausal_full_attention every token reads its whole row: rows of several lengths
    in one pass need only their padding keys hidden ([B, 1, 1, W]); the answers are the dense
    reference path's."""
    engine = engines["hybrid-noncausal"]
    with sdpa_masks() as seen:
        results = engine.answer_batch(REQUESTS)
    assert seen and all(mask is None or mask[-2] == 1 for mask in seen)
    for request, result in zip(REQUESTS, results):
        assert max_dp(result, references["hybrid-noncausal"].answer(request)) <= TOLERANCE


@pytest.mark.parametrize("preset", ["hybrid-prefix-bidir", "llama-prefix-bidir"])
def test_states_prefilled_together_answer_as_the_reference_path(
    fresh_engine: Callable[..., Engine], references: dict[str, Engine], preset: str
) -> None:
    """Several distinct states of different lengths in one left-padded pass (what CUDA does)."""
    engine: Engine = fresh_engine(preset)
    engine.batch_prefills = True
    with sdpa_masks() as seen:
        together = engine.answer_batch(REQUESTS)
    widest = max(len(engine.checkpoint.tokenizer.encode(r.state).ids) for r in REQUESTS)  # type: ignore[arg-type]
    # Padding keys hidden by one [B, 1, 1, W] bias: no mask holds a query axis of the state's width.
    assert all(mask is None or mask[-2] < widest for mask in seen)
    for request, result in zip(REQUESTS, together):
        assert max_dp(result, references[preset].answer(request)) <= TOLERANCE
    # Each state was computed once and is cached: the same requests again are all hits.
    assert all(r.state_cache_hit for r in engine.answer_batch(REQUESTS))


def test_a_state_prefilled_with_others_is_the_state_prefilled_alone(engines: dict[str, Engine]) -> None:
    backbone = engines["hybrid-prefix-bidir"].backbone
    tokenizer = engines["hybrid-prefix-bidir"].checkpoint.tokenizer
    states = [tokenizer.encode(" ".join(LINES[: 1 + 4 * i])).ids for i in range(3)]
    together = backbone.prefill_many(states, "prefix_bidir")
    for ids, snapshot in zip(states, together):
        alone = backbone.prefill(ids, "prefix_bidir")
        assert snapshot.length == alone.length and snapshot.nbytes == alone.nbytes  # its own copies
        for a, b in zip(
            [t for layer in snapshot.layers for t in layer.tensors],
            [t for layer in alone.layers for t in layer.tensors],
        ):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4)
        assert torch.allclose(snapshot.hidden, alone.hidden, atol=1e-4)


@pytest.mark.parametrize("case", ["one image", "several images"])
def test_states_with_media_prefilled_together_read_their_media_in_place(
    fresh_engine: Callable[..., Engine], references: dict[str, Engine], case: str
) -> None:
    engine: Engine = fresh_engine(test_media.PRESET)
    engine.batch_prefills = True
    doc = {**test_media.CASES[case], "questions": test_media.QUESTIONS}
    text = {"state": "A much longer text state, so the media state is padded. " * 4, "questions": test_media.QUESTIONS}
    requests = [_decision(engine, doc), _decision(engine, text)]
    for request, result in zip(requests, engine.answer_batch(requests)):
        assert max_dp(result, references[test_media.PRESET].answer(request)) <= TOLERANCE


def _decision(engine: Engine, doc: dict[str, Any]) -> DecisionRequest:
    """What the engine gets for a request body on this model."""
    plan = to_engine(read(json.dumps(doc).encode(), "vllm-sr/5.0").ir, engine.card()).items[""]  # type: ignore[arg-type]
    assert plan.request is not None
    return plan.request


def test_cpu_keeps_one_state_a_pass_and_its_budget() -> None:
    assert not batch_state_prefills("cpu") and batch_state_prefills("cuda")
    assert default_token_budget("cpu") == 16_384 and default_token_budget("cuda:0") == 65_536
    assert linear_attention_kernel("cpu") == "torch"  # flash-linear-attention's kernels are CUDA's
    # vllm-srun serve --max-batch-tokens: the device's budget unless given
    assert ServerSettings("m", device="cuda").batch_tokens == 65_536 and ServerSettings("m").batch_tokens == 16_384
    assert ServerSettings("m", device="cuda", max_batch_tokens=8_192).batch_tokens == 8_192


def test_attend_returns_the_log_sum_exp_in_every_dtype() -> None:
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 3, 7, 16) for _ in range(3))
    bias = torch.zeros(2, 1, 7, 7).masked_fill_(torch.rand(2, 1, 7, 7) > 0.6, -1e30)
    want, want_lse = plain_attend(query, key, value, bias, 0.25)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        out, lse = attend(query.to(dtype), key.to(dtype), value.to(dtype), bias.clamp_min(-6e4).to(dtype), 0.25)
        assert out.dtype == dtype and lse.dtype == torch.float32
        assert torch.allclose(out.float(), want, atol=0.05) and torch.allclose(lse, want_lse, atol=0.05)


def test_a_bias_is_laid_out_with_aligned_rows_once() -> None:
    bias = torch.randn(2, 1, 5, 13)
    aligned = aligned_bias(bias)
    assert torch.equal(aligned, bias) and aligned.stride(-2) == 16
    assert aligned_bias(aligned).data_ptr() == aligned.data_ptr()  # already aligned: kept


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@cuda
def test_cuda_attention_runs_on_the_fused_kernels_only(checkpoints: dict[str, Path]) -> None:
    """Skipped without a CUDA GPU (run on one: pytest -m cuda). In bfloat16 on CUDA every
    backbone pass runs with SDPA restricted to the flash and memory-efficient kernels (a math
    fallback raises), the shared-prefix attention returns what the plain computation does, and
    a 16K-token state costs memory linear in it (its [S, S] scores alone would be 512 MiB)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 300, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        flash, lse = attend(q, k, v, None, 0.125)
        bias = torch.zeros(1, 1, 300, 300, device="cuda", dtype=torch.bfloat16)
        efficient, lse_e = attend(q, k, v, aligned_bias(bias), 0.125)
    want, want_lse = plain_attend(q, k, v, None, 0.125)
    for out, got in ((flash, lse), (efficient, lse_e)):
        assert torch.allclose(out.float(), want.float(), atol=0.02) and torch.allclose(got, want_lse, atol=0.02)

    reference = Engine.load(checkpoints["hybrid-prefix-bidir"], reference=True)
    # float16 for the bar (bfloat16's 8-bit mantissa moves these deliberately sensitive tiny
    # weights near it on CPU already); bfloat16 must answer, through the same kernels.
    for dtype, bar in (("float16", 0.03), ("bfloat16", 0.06)):
        engine = Engine.load(checkpoints["hybrid-prefix-bidir"], device="cuda", dtype=dtype)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            results = engine.answer_batch(REQUESTS)  # six distinct states prefilled together
        for request, result in zip(REQUESTS, results):
            assert max_dp(result, reference.answer(request)) <= bar
    ids = (engine.checkpoint.tokenizer.encode(" ".join(LINES)).ids * 40)[:16_384]
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        engine.backbone.prefill(ids, "prefix_bidir")
    assert torch.cuda.max_memory_allocated() - before < 256 * 2**20
