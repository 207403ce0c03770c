"""Question rows reading a shared state: the same attention as over a copy of the state per row."""

from __future__ import annotations

import pytest
import torch

from sr_runtime.mask import question_mask
from sr_runtime.shared_prefix import MASKED, SharedPrefix, attend, blocks, plain_attend, shared_prefix_attention


class Layer(torch.nn.Module):
    """What the attention function reads of a transformers attention layer."""

    layer_idx = 0
    num_key_value_groups = 2  # grouped-query attention: 4 query heads over 2 key heads
    is_causal = True


@pytest.mark.parametrize("mode", ["prefix_bidir", "causal"])
def test_runs_over_a_shared_state_equal_attention_over_a_copy_per_row(mode: str) -> None:
    torch.manual_seed(0)
    heads, kv_heads, d = 4, 2, 8
    state_lens, groups, question_lens = [40, 3], [0, 0, 0, 1, 1], [5, 2, 4, 5, 1]
    rows, width = len(groups), max(question_lens)
    states = [(torch.randn(1, kv_heads, s, d), torch.randn(1, kv_heads, s, d)) for s in state_lens]
    query = torch.randn(rows, heads, width, d)
    key, value = torch.randn(rows, kv_heads, width, d), torch.randn(rows, kv_heads, width, d)
    mask = question_mask(mode, question_lens, width)  # type: ignore[arg-type]
    prefix = SharedPrefix({0: states}, blocks(groups, state_lens, width, budget=100), mask)
    assert prefix.blocks == [(0, 2, 0), (2, 3, 0), (3, 5, 1)]  # 100 // (40 + 5) = 2 rows a run of the first state
    out, _ = shared_prefix_attention(Layer(), query, key, value, None, shared_prefix=prefix)
    # Padding tokens read the state too: no NaN that a next layer could carry into real tokens.
    assert not out.isnan().any()
    for b, g in enumerate(groups):
        q = question_lens[b]
        k_s, v_s = states[g]
        keys = torch.cat([k_s[0], key[b, :, :q]], dim=1).repeat_interleave(2, dim=0)  # [heads, S + q, d]
        values = torch.cat([v_s[0], value[b, :, :q]], dim=1).repeat_interleave(2, dim=0)
        allowed = torch.cat([torch.ones(q, state_lens[g], dtype=torch.bool), mask[b, 0, :q, :q]], dim=1)
        expected = torch.nn.functional.scaled_dot_product_attention(query[b, :, :q], keys, values, attn_mask=allowed)
        assert torch.allclose(out[b, :q].transpose(0, 1), expected, atol=1e-5)


def test_the_fused_cpu_kernel_and_the_plain_scores_agree_with_their_log_sum_exps() -> None:
    # GPUs take the plain path; this holds it equal to the CPU kernel, masks and all.
    torch.manual_seed(1)
    query, key, value = torch.randn(3, 2, 7, 8), torch.randn(3, 2, 5, 8), torch.randn(3, 2, 5, 8)
    mask = torch.zeros(3, 1, 7, 5).masked_fill_(torch.rand(3, 1, 7, 5) > 0.6, MASKED)
    mask[1, 0, 2] = MASKED  # a query that reads nothing here: finite, so no NaN
    for m in (None, mask):
        out, lse = attend(query, key, value, m, 0.3)
        ref_out, ref_lse = plain_attend(query, key, value, m, 0.3)
        assert torch.allclose(lse, ref_lse, atol=1e-4)
        reads = lse > MASKED / 2  # what a query that reads nothing gets does not matter: its weight is 0
        assert torch.allclose(out[reads], ref_out[reads], atol=1e-5) and not out.isnan().any()


@pytest.mark.parametrize("mode", ["prefix_bidir", "causal"])
def test_the_last_layer_attends_for_each_rows_last_token_alone_and_gets_it_right(mode: str) -> None:
    torch.manual_seed(2)
    state_lens, groups, question_lens = [9, 4], [0, 0, 1], [3, 5, 2]
    width = max(question_lens)
    states = [(torch.randn(1, 2, s, 8), torch.randn(1, 2, s, 8)) for s in state_lens]
    query, key, value = torch.randn(3, 4, width, 8), torch.randn(3, 2, width, 8), torch.randn(3, 2, width, 8)
    mask = question_mask(mode, question_lens, width)  # type: ignore[arg-type]
    runs = blocks(groups, state_lens, width, budget=100)
    every, _ = shared_prefix_attention(
        Layer(), query, key, value, None, shared_prefix=SharedPrefix({0: states}, runs, mask)
    )
    last = torch.tensor(question_lens) - 1
    only, _ = shared_prefix_attention(
        Layer(), query, key, value, None, shared_prefix=SharedPrefix({0: states}, runs, mask, read_layer=0, last=last)
    )
    rows = torch.arange(3)
    assert torch.allclose(only[rows, last], every[rows, last], atol=1e-6)
    assert not only.isnan().any()
