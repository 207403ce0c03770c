"""Attention masks for the three attention modes, as boolean matrices (True = may attend).

Rows are queries, columns are keys. A prompt is a state block of S tokens then a question block
of Q tokens. These masks apply to full-attention layers only: linear-attention (Gated DeltaNet)
layers are causal by construction and take no mask.
"""

from __future__ import annotations

from typing import Literal

import torch

AttentionMode = Literal["causal", "noncausal_full_attention", "prefix_bidir"]
ATTENTION_MODES: tuple[AttentionMode, ...] = ("causal", "noncausal_full_attention", "prefix_bidir")


def causal_mask(length: int) -> torch.Tensor:
    """Each token reads itself and what comes before it."""
    return torch.ones(length, length, dtype=torch.bool).tril()


def prefix_bidir_mask(state_len: int, question_len: int) -> torch.Tensor:
    """The state reads itself both ways; the question reads the state and itself both ways.

    For S = 3, Q = 2 (s = state, q = question; rows read columns)::

            s s s q q
        s [ 1 1 1 0 0 ]
        s [ 1 1 1 0 0 ]
        s [ 1 1 1 0 0 ]
        q [ 1 1 1 1 1 ]
        q [ 1 1 1 1 1 ]

    The state never sees a question, so every layer's output on the state is the same whatever
    question follows: that is what lets the state be computed once.
    """
    n = state_len + question_len
    mask = torch.zeros(n, n, dtype=torch.bool)
    mask[:state_len, :state_len] = True
    mask[state_len:, :] = True
    return mask


def full_mask(length: int) -> torch.Tensor:
    """`noncausal_full_attention`: every token reads the whole prompt (the state reads questions)."""
    return torch.ones(length, length, dtype=torch.bool)


def prompt_mask(mode: AttentionMode, state_len: int, question_len: int) -> torch.Tensor:
    """The dense [L, L] mask of one whole prompt in `mode` (the reference path's mask)."""
    if mode == "prefix_bidir":
        return prefix_bidir_mask(state_len, question_len)
    if mode == "causal":
        return causal_mask(state_len + question_len)
    return full_mask(state_len + question_len)


def state_mask(mode: AttentionMode, state_len: int) -> torch.Tensor:
    """The [S, S] mask of a state prefill: both ways under prefix_bidir, else causal."""
    return full_mask(state_len) if mode == "prefix_bidir" else causal_mask(state_len)


def question_mask(mode: AttentionMode, question_lens: list[int], question_width: int) -> torch.Tensor:
    """[B, 1, Qw, Qw]: which question tokens each question token of a row reads.

    Every question token also reads its whole state, which a question pass keeps apart
    (sr_runtime/shared_prefix.py), so this is the question block of the prompt mask. Padding
    keys are never read; padding queries read no question token (they still read the state,
    so no softmax row is empty).
    """
    i = torch.arange(question_width)
    real = i[None, :] < torch.tensor(question_lens)[:, None]  # [B, Qw]: token i of row b is not padding
    mask = real[:, :, None] & real[:, None, :]
    if mode == "causal":
        mask &= causal_mask(question_width)
    return mask[:, None]


def padded_prompt_mask(mode: AttentionMode, state_lens: list[int], prompt_lens: list[int], width: int) -> torch.Tensor:
    """[B, 1, W, W] for whole prompts right-padded to `width`: each row's own mask, padding unread."""
    rows = len(prompt_lens)
    mask = torch.zeros(rows, 1, width, width, dtype=torch.bool)
    for b, (s, n) in enumerate(zip(state_lens, prompt_lens)):
        mask[b, 0, :n, :n] = prompt_mask(mode, s, n - s)
        mask[b, 0, n:, 0] = True
    return mask
