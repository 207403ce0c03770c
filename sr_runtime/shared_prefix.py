"""Question rows that read their state's keys and values once, not from per-row copies.

A question pass holds rows of one or more states, the rows of a state side by side. In a
full-attention layer the questions of a run of rows of one state are read as one sequence of
queries over one sequence of keys, the state's then each question's:

    keys    [K_s ; K_q1 ; K_q2 ; ... ]          (K_s: [1, kv_heads, S, d], computed once)
    mask    question i reads all of K_s, and K_qi under the question block's mask M_i

        K_s   K_q1  K_q2
    q1 [ 1..1  M_1   0   ]
    q2 [ 1..1   0   M_2  ]

Each question's softmax thus runs over exactly [K_s; K_qi], the keys a per-row copy of the
state would hold, while the state is held once per run instead of once per row (nor padded to
the longest state of the pass). A run holds at most budget // (S + Qw) rows, so a pass's
scores take no more memory than a pass of per-row copies would (see `blocks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

ATTENTION = "sr_shared_prefix"


@dataclass(frozen=True, eq=False, slots=True)
class SharedPrefix:
    """What a question pass's attention layers read besides the rows' own tokens."""

    kv: dict[int, Sequence[tuple[torch.Tensor, torch.Tensor]]]  # layer -> each state's K, V [1, kv_heads, S, d]
    blocks: Sequence[tuple[int, int, int]]  # (first row, end row, state): rows of one state, a block at a time
    mask: torch.Tensor  # [B, 1, Qw, Qw] bool: which question tokens each question token reads


def blocks(groups: Sequence[int], state_lens: Sequence[int], question_width: int, budget: int) -> list[tuple[int, int, int]]:
    """Runs of rows of one state (`groups[b]` is row b's state), as (first row, end row, state).

    A run of r rows holds at most budget // (S + Qw) of them (memory), and each of its queries
    also scores the other questions' keys, masked: (r - 1) Qw wasted columns, kept under a
    quarter of the state's S.
    """
    out: list[tuple[int, int, int]] = []
    start = 0
    for b in range(1, len(groups) + 1):
        s = state_lens[groups[start]]
        most = max(1, min(budget // (s + question_width), 1 + s // (4 * question_width)))
        if b == len(groups) or groups[b] != groups[start] or b - start >= most:
            out.append((start, b, groups[start]))
            start = b
    return out


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, H, Qw, d]
    key: torch.Tensor,  # [B, kv_heads, Qw, d]: the rows' own question tokens
    value: torch.Tensor,  # [B, kv_heads, Qw, d]
    attention_mask: torch.Tensor | None,
    shared_prefix: SharedPrefix | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA, over each run's state and questions when the pass reads a shared prefix; returns
    [B, Qw, H, d] as transformers' SDPA does."""
    if shared_prefix is None:  # a state prefill or a whole prompt: plain attention
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    rows, heads, width, d = query.shape
    kv_heads = key.shape[1]
    kv = shared_prefix.kv[module.layer_idx]  # type: ignore[index]
    out = query.new_empty(rows, width, heads, d)
    for start, end, g in shared_prefix.blocks:
        k_s, v_s = kv[g]  # [1, kv_heads, S, d]
        r = end - start
        q = query[start:end].transpose(0, 1).reshape(1, heads, r * width, d)  # the run's questions, one sequence
        k = torch.cat([k_s, key[start:end].transpose(0, 1).reshape(1, kv_heads, r * width, d)], dim=2)
        v = torch.cat([v_s, value[start:end].transpose(0, 1).reshape(1, kv_heads, r * width, d)], dim=2)
        reads_state = torch.ones(r * width, k_s.shape[2], dtype=torch.bool, device=query.device)
        mask = torch.cat([reads_state, torch.block_diag(*shared_prefix.mask[start:end, 0])], dim=1)
        o, _ = sdpa_attention_forward(module, q, k, v, mask[None, None], **kwargs)  # [1, r * Qw, H, d]
        out[start:end] = o.view(r, width, heads, d)
    return out, None


AttentionInterface.register(ATTENTION, shared_prefix_attention)
