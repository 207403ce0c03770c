"""Question rows that read their state's keys and values once, not from per-row copies.

A question pass holds rows of one or more states, the rows of a state side by side. In a
full-attention layer each question token's softmax runs over exactly the keys a per-row copy of
the state would hold: all of the state's K_s, and its own question's K_q under the question
block's mask M. The two parts are attended separately and merged by their log-sum-exps (as
split-K attention kernels do):

    o_s, l_s = attend(Q, K_s, V_s)          one call for a run of rows of one state: its r * Qw
                                            queries against the state's S keys, K_s held once
    o_q, l_q = attend(Q, K_q, V_q, M)       one call for every row of the pass, each its own block
    out      = o_s * exp(l_s - l) + o_q * exp(l_q - l),   l = logaddexp(l_s, l_q)

which equals softmax([Q K_s^T | Q K_q^T + log M]) [V_s ; V_q] row by row. Nothing is scored
that is then masked away across questions, and nothing of the state is copied or padded. On
CPU `attend` is PyTorch's fused flash kernel, on CUDA the flash or memory-efficient kernel
(sr_runtime/kernels.py): each returns the log-sum-exp and never holds the scores. A run holds
at most budget // (S + Qw) rows, so a pass's scores take no more memory than a pass of per-row
copies would (see `blocks`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from sr_runtime.kernels import aligned_bias, attend, plain_attend, state_attention

if TYPE_CHECKING:
    from sr_runtime.one_pass import OnePass

ATTENTION = "sr_shared_prefix"
__all__ = [
    "ATTENTION",
    "MASKED",
    "LastTokenTail",
    "SharedPrefix",
    "StatePass",
    "attend",
    "attend_rows",
    "blocks",
    "plain_attend",
]


@dataclass(frozen=True, eq=False, slots=True)
class SharedPrefix:
    """What a question pass's attention layers read besides the rows' own tokens."""

    kv: dict[int, Sequence[tuple[torch.Tensor, torch.Tensor]]]  # layer -> each state's K, V [1, kv_heads, S, d]
    blocks: Sequence[tuple[int, int, int]]  # (first row, end row, state): rows of one state, a block at a time
    mask: torch.Tensor  # [B, 1, Qw, Qw] bool: which question tokens each question token reads
    # After this layer only each row's `last` token is read (the readout's): its queries alone
    # attend there. -1: every layer attends for every token.
    read_layer: int = -1
    last: torch.Tensor | None = None  # [B]: each row's last real token
    # The additive form of `mask` the question part attends under, made once a pass for all its
    # layers: (query tokens a row, query heads a key/value head) -> [B, 1, G * L, Qw].
    scores: dict[tuple[int, int], torch.Tensor] = field(default_factory=dict)

    def question_scores(self, width: int, group: int, dtype: torch.dtype) -> torch.Tensor:
        """0 where a query token reads a question key, MASKED where it does not; for the read
        layer (width 1) each row's last token alone."""
        made = self.scores.get((width, group))
        if made is None:
            mask = self.mask
            if width == 1 and self.last is not None:
                mask = mask[torch.arange(mask.shape[0], device=mask.device), :, self.last].unsqueeze(2)
            made = torch.zeros(mask.shape[0], 1, group * width, mask.shape[-1], dtype=dtype, device=mask.device)
            made.masked_fill_(~mask.repeat(1, 1, group, 1), masked(dtype))
            if made.device.type == "cuda":  # made once a pass, in the layout the fused kernel reads
                made = aligned_bias(made)
            self.scores[(width, group)] = made
        return made


@dataclass(frozen=True, eq=False, slots=True)
class StatePass:
    """A state block's pass (or whole noncausal_full_attention prompts): full-attention layers
    attend with no [S, S] mask.

    Under prefix_bidir every state token reads every other one (SDPA with no mask, is_causal
    False); under causal SDPA's own causal flag. States of several lengths in one pass are
    left-padded: `keys` ([B, 1, 1, W], additive) hides each row's padding keys, memory linear in
    the state, and only under prefix_bidir (a causal pass of one state needs none)."""

    bidirectional: bool
    keys: torch.Tensor | None = None


def blocks(
    groups: Sequence[int], state_lens: Sequence[int], question_width: int, budget: int
) -> list[tuple[int, int, int]]:
    """Runs of rows of one state (`groups[b]` is row b's state), as (first row, end row, state):
    a run holds at most budget // (S + Qw) rows, the memory its scores take."""
    out: list[tuple[int, int, int]] = []
    start = 0
    for b in range(1, len(groups) + 1):
        s = state_lens[groups[start]]
        most = max(1, budget // (s + question_width))
        if b == len(groups) or groups[b] != groups[start] or b - start >= most:
            out.append((start, b, groups[start]))
            start = b
    return out


# A masked-out score: finite, so that a padding query reading no question key gets weight 0 on
# that part instead of a NaN (it still reads the state).
MASKED = -1e30


def masked(dtype: torch.dtype) -> float:
    """MASKED in `dtype`: float16 tops out at 65504, so there it is half its most negative
    value (a score plus it stays finite)."""
    return MASKED if dtype != torch.float16 else torch.finfo(dtype).min / 2


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, H, Qw, d]
    key: torch.Tensor,  # [B, kv_heads, Qw, d]: the rows' own question tokens
    value: torch.Tensor,  # [B, kv_heads, Qw, d]
    attention_mask: torch.Tensor | None,
    shared_prefix: SharedPrefix | None = None,
    scaling: float | None = None,
    state_pass: StatePass | None = None,
    one_pass: OnePass | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over each row's state and its own question when the pass reads a shared prefix,
    a state block's attention without a dense mask (`state_pass`), a state and its rows packed
    in one pass (`one_pass`), else SDPA under the pass's mask (a whole prompt); returns
    [B, Qw, H, d] as transformers' SDPA does."""
    if one_pass is not None:
        scale = query.shape[-1] ** -0.5 if scaling is None else scaling
        return one_pass.attend(query, key, value, module.layer_idx, scale), None  # type: ignore[arg-type]
    if state_pass is not None:  # whatever mask transformers made is not read
        scale = query.shape[-1] ** -0.5 if scaling is None else scaling
        return state_attention(query, key, value, state_pass.keys, not state_pass.bidirectional, scale), None
    if shared_prefix is None:  # a whole prompt: plain attention under its mask
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    d = query.shape[-1]
    scale = d**-0.5 if scaling is None else scaling
    layer: int = module.layer_idx  # type: ignore[assignment]  # transformers' attention modules carry it untyped
    kv = shared_prefix.kv[layer]
    group = query.shape[1] // key.shape[1]
    if layer != shared_prefix.read_layer or shared_prefix.last is None:
        scores = shared_prefix.question_scores(query.shape[2], group, query.dtype)
        return attend_rows(query, key, value, scores, kv, shared_prefix.blocks, scale), None
    # The last layer: what it computes for any other token is never read, so only each row's
    # last token attends. `LastTokenTail` then takes each row's last token for the rest of the
    # layer, so every token of a row may hold that token's output.
    rows = torch.arange(query.shape[0], device=query.device)
    scores = shared_prefix.question_scores(1, group, query.dtype)
    read = attend_rows(
        query[rows, :, shared_prefix.last].unsqueeze(2), key, value, scores, kv, shared_prefix.blocks, scale
    )
    return read.expand(-1, query.shape[2], -1, -1), None


def attend_rows(
    query: torch.Tensor,  # [B, H, L, d]: L query tokens of each row
    key: torch.Tensor,  # [B, kv_heads, Qw, d]: the rows' own question tokens
    value: torch.Tensor,
    question_scores: torch.Tensor,  # [B, 1, G * L, Qw]: 0 where a query reads a question key, else MASKED
    kv: Sequence[tuple[torch.Tensor, torch.Tensor]],  # each state's K, V [1, kv_heads, S, d]
    runs: Sequence[tuple[int, int, int]],
    scale: float,
) -> torch.Tensor:
    """[B, L, H, d]: each query over its row's state and its own question, merged by log-sum-exp."""
    rows, heads, width, d = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads  # query heads reading one key/value head
    # Queries as [kv_heads, G, B, L, d]: a run's queries of one key/value head are one sequence.
    q = query.view(rows, kv_heads, group, width, d).permute(1, 2, 0, 3, 4)
    # Each row's own question, all rows at once: the G heads of a key/value head as one sequence.
    o_q, l_q = attend(
        q.permute(2, 0, 1, 3, 4).reshape(rows, kv_heads, group * width, d), key, value, question_scores, scale
    )
    o_q, l_q = (
        o_q.view(rows, kv_heads, group, width, d).permute(1, 2, 0, 3, 4),
        l_q.view(rows, kv_heads, group, width).permute(1, 2, 0, 3),
    )
    o_s = query.new_empty(kv_heads, group, rows, width, d)
    l_s = query.new_empty(kv_heads, group, rows, width, dtype=torch.float32)  # log-sum-exps stay float32
    for start, end, g in runs:
        k_s, v_s = kv[g]  # [1, kv_heads, S, d]
        r = end - start
        o, lse = attend(q[:, :, start:end].reshape(1, kv_heads, group * r * width, d), k_s, v_s, None, scale)
        o_s[:, :, start:end] = o.view(kv_heads, group, r, width, d)
        l_s[:, :, start:end] = lse.view(kv_heads, group, r, width)
    # o_s e^(l_s - l) + o_q e^(l_q - l) with l = logaddexp(l_s, l_q) is o_q + (o_s - o_q) w,
    # w = sigmoid(l_s - l_q): one lerp instead of eight passes over the outputs.
    # The log-sum-exps are float32 whatever the dtype; the weight takes the outputs' dtype.
    out = torch.lerp(o_q, o_s, torch.sigmoid(l_s - l_q)[..., None].to(o_q.dtype))
    return out.permute(2, 3, 0, 1, 4).reshape(rows, width, heads, d)


class LastTokenTail:
    """The read layer's output projection, its MLP and the model's final norm, for the tokens
    the pass reads alone.

    After the read layer's attention only each row's last token is read (the readout's), so
    the rest of that layer need run for that token only. In a question pass ([B, W, h]) forward
    pre-hooks on those modules take it ([B, 1, h]); the layer's residual adds broadcast the
    result back over the row, right at the last token and never read elsewhere, and the model
    returns [B, 1, hidden]. In a packed pass ([1, T, h], sr_runtime/one_pass.py) they take the
    `tokens` read (the state's and each row's last), and forward hooks on the output projection
    and the MLP put their outputs back in place in a [1, T, h] tensor, so that the residual adds
    line up; the model returns [1, tokens, hidden]. Set `last` ([B]: each row's last real token)
    for a question pass, or `tokens` for a packed one, and neither for every other pass.
    """

    def __init__(self, model: Any, layer: int) -> None:
        # `Any`: the decoder stack's attributes (llama's and Qwen3.5's alike) are not typed by torch.
        self.last: torch.Tensor | None = None
        self.tokens: torch.Tensor | None = None
        self.width = 0  # a packed pass's T
        base = model.base_model
        decoder = base.layers[layer]
        modules: tuple[torch.nn.Module, ...] = (decoder.self_attn.o_proj, decoder.post_attention_layernorm, base.norm)
        for module in modules:
            module.register_forward_pre_hook(self._take)
        for module in (decoder.self_attn.o_proj, decoder.mlp):
            module.register_forward_hook(self._put)

    @contextmanager
    def reading(self, last: torch.Tensor) -> Iterator[None]:
        """For one question pass: each row's last token alone after the read layer's attention."""
        self.last = last
        try:
            yield
        finally:
            self.last = None

    @contextmanager
    def reading_tokens(self, tokens: torch.Tensor, width: int) -> Iterator[None]:
        """For one packed pass of `width` tokens: these alone after the read layer's attention."""
        self.tokens, self.width = tokens, width
        try:
            yield
        finally:
            self.tokens = None

    def _take(self, module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        x = args[0]
        if self.last is not None:
            return (x[torch.arange(x.shape[0], device=x.device), self.last].unsqueeze(1), *args[1:])
        if self.tokens is not None:
            return (x[:, self.tokens], *args[1:])
        return None

    def _put(self, module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor | None:
        if self.tokens is None:
            return None
        # Every other token holds its residual alone from here on, and nothing reads it.
        full = output.new_zeros(output.shape[0], self.width, output.shape[-1])
        full[:, self.tokens] = output
        return full


AttentionInterface.register(ATTENTION, shared_prefix_attention)
