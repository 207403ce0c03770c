"""A cold state and its question rows in one pass of the backbone.

A request whose state is not cached takes two passes the usual way: the state block (keeping
every layer's state at its end), then the question rows continuing from it. Each pass costs the
dispatch of every layer's kernels, and for a small request on a GPU that fixed cost, not
arithmetic, is most of the time. Here both are one pass over one packed sequence:

    tokens    = [ state (S) | row 0 (Qw) | row 1 (Qw) | ... | row B-1 (Qw) ]
    positions = [ 0 .. S-1  | S .. S+Qw-1 | S .. S+Qw-1 | ... ]

Everything a token computes alone (norms, projections, MLP) runs once over all of them. What
mixes tokens runs per part, in the order the two passes would:

- a full-attention layer attends the state block to itself (no mask; causal under `causal`),
  then each row to the state's keys and values and its own question (`attend_rows`, as
  shared_prefix.py does for a question pass);
- a linear-attention layer runs its causal conv and gated delta rule over the state, then over
  the rows, each row continuing from the state's conv window and recurrent state (one batched
  call, `initial_state`).

So each token reads exactly what it reads in the two passes, and the pass keeps what a state pass
keeps (`kv`, `recurrent`): the StateSnapshot is the same and goes into the state cache as usual.
Rows are right-padded to Qw; padding comes after a row's last token and is never read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5

from sr_runtime.kernels import state_attention
from sr_runtime.projections import fuse
from sr_runtime.shared_prefix import SharedPrefix, attend_rows


@dataclass(frozen=True, eq=False, slots=True)
class OnePass:
    """The layout of a packed state-and-questions pass, and what its layers keep of the state."""

    state: int  # S: the state block's tokens, first in the sequence
    rows: int  # B: question rows after it, each `width` tokens
    width: int  # Qw
    bidirectional: bool  # the state block under prefix_bidir (else causal)
    prefix: SharedPrefix  # how the rows read the state and their own questions
    # Filled by the pass, layer by layer: what a state pass's cache would hold.
    kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # [1, kv_heads, S, d], RoPE'd
    recurrent: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # conv window, state

    def rows_of(self, x: torch.Tensor) -> torch.Tensor:
        """[B, Qw, ...]: the question part of a token-major [T, ...] tensor."""
        return x[self.state :].unflatten(0, (self.rows, self.width))

    def attend(
        self,
        query: torch.Tensor,  # [1, H, T, d]
        key: torch.Tensor,  # [1, kv_heads, T, d]
        value: torch.Tensor,
        layer: int,
        scale: float,
    ) -> torch.Tensor:
        """[1, T, H, d]: the state block over itself, then each row over the state and its question."""
        s, b, w = self.state, self.rows, self.width
        k_s, v_s = key[:, :, :s], value[:, :, :s]
        self.kv[layer] = (k_s, v_s)
        o_s = state_attention(query[:, :, :s], k_s, v_s, None, not self.bidirectional, scale)  # [1, S, H, d]

        def rows(x: torch.Tensor) -> torch.Tensor:  # [1, h, B * Qw, d] -> [B, h, Qw, d]
            return x[0, :, s:].unflatten(1, (b, w)).transpose(0, 1)

        group = query.shape[1] // key.shape[1]
        queries, last = rows(query), self.prefix.last
        if layer == self.prefix.read_layer and last is not None:
            # The read layer: only each row's last token is read after it (LastTokenTail), so
            # only it attends, as in a question pass; the row holds its output throughout.
            queries = queries[torch.arange(b, device=query.device), :, last].unsqueeze(2)
            scores = self.prefix.question_scores(1, group, query.dtype)
        else:
            scores = self.prefix.question_scores(w, group, query.dtype)
        o_q = attend_rows(queries, rows(key), rows(value), scores, [(k_s, v_s)], self.prefix.blocks, scale)
        return torch.cat([o_s[0], o_q.expand(-1, w, -1, -1).flatten(0, 1)]).unsqueeze(0)


def linear_attention(
    mixer: Any,  # transformers' Qwen3_5GatedDeltaNet: its weights and sizes are not typed by torch
    original: Callable[..., torch.Tensor],
    hidden_states: torch.Tensor,
    cache_params: Any = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """A Gated DeltaNet layer over a packed pass: its projections once over every token, its
    conv and delta rule over the state and then over the rows from the state's end. Any other
    pass goes to transformers' own forward."""
    one: OnePass | None = kwargs.get("one_pass")
    if one is None:
        return original(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
    s, b, w = one.state, one.rows, one.width
    x = hidden_states[0]  # [T, hidden]
    # pre [T, C]: q, k and v before their causal conv; z the output gate; beta's input and the
    # decay's. One GEMM where install could fuse them (sr_runtime/projections.py).
    projections = (mixer.in_proj_qkv, mixer.in_proj_z, mixer.in_proj_b, mixer.in_proj_a)
    fused: torch.Tensor | None = getattr(mixer, "in_proj", None)
    if fused is None:
        pre, z, beta_in, decay_in = (p(x) for p in projections)
    else:
        widths = [p.out_features for p in projections]
        pre, z, beta_in, decay_in = torch.nn.functional.linear(x, fused).split(widths, dim=-1)
    beta = beta_in.sigmoid()
    # The decay in float32 (in fp16 A might be -inf); -exp(A_log) is made once, at install.
    g = mixer.decay_rate * torch.nn.functional.softplus(decay_in.float() + mixer.dt_bias)

    weight, kernel = mixer.conv1d.weight.squeeze(1), mixer.conv_kernel_size
    state_in = pre[:s].T[None]  # [1, C, S]
    # The conv window a state pass keeps: its last `kernel` inputs, zeros before a short state.
    # Its own copy, made now: a view would keep this layer's whole projection output alive
    # until the pass ends (48 layers of [T, 16K] at a 24K-token state: tens of GB).
    window = torch.nn.functional.pad(state_in[..., -kernel:], (max(0, kernel - s), 0)).clone()
    conv_s = qwen3_5.causal_conv1d_fn(state_in, weight, mixer.conv1d.bias, activation=mixer.activation)
    # Each row's conv reads the window first, as a question pass's cache hands it over.
    rows_in = torch.cat([window.expand(b, -1, -1), one.rows_of(pre).transpose(1, 2)], dim=-1)
    conv_q = qwen3_5.causal_conv1d_fn(rows_in, weight, mixer.conv1d.bias, activation=mixer.activation)[..., -w:]
    mixed = torch.cat([conv_s[0].T, conv_q.transpose(1, 2).flatten(0, 1)])  # [T, C]

    query, key, value = torch.split(mixed, [mixer.key_dim, mixer.key_dim, mixer.value_dim], dim=-1)
    query, key = query.unflatten(-1, (-1, mixer.head_k_dim)), key.unflatten(-1, (-1, mixer.head_k_dim))
    value = value.unflatten(-1, (-1, mixer.head_v_dim))
    if mixer.num_v_heads // mixer.num_k_heads > 1:
        query = query.repeat_interleave(mixer.num_v_heads // mixer.num_k_heads, dim=1)
        key = key.repeat_interleave(mixer.num_v_heads // mixer.num_k_heads, dim=1)

    rule = partial(qwen3_5.torch_chunk_gated_delta_rule, output_final_state=True, use_qk_l2norm_in_kernel=True)
    o_s, state = rule(query[None, :s], key[None, :s], value[None, :s], g=g[None, :s], beta=beta[None, :s])
    one.recurrent[mixer.layer_idx] = (window, state)
    o_q, _ = rule(
        *(one.rows_of(t) for t in (query, key, value)),
        g=one.rows_of(g),
        beta=one.rows_of(beta),
        initial_state=state.expand(b, -1, -1, -1).contiguous(),  # each row updates its own copy
    )
    out = torch.cat([o_s[0], o_q.flatten(0, 1)])  # [T, v_heads, v_dim]
    out = mixer.norm(out.flatten(0, 1), z.reshape(-1, mixer.head_v_dim)).view(1, x.shape[0], -1)
    return mixer.out_proj(out)


def install(model: Any) -> None:
    """Give every linear-attention layer of a loaded model the packed forward (other passes keep
    transformers' own), its four input projections one matrix. Full-attention layers take theirs
    through shared_prefix_attention."""
    for layer in model.base_model.layers:
        mixer = getattr(layer, "linear_attn", None)
        if mixer is not None:
            mixer.in_proj = fuse([mixer.in_proj_qkv, mixer.in_proj_z, mixer.in_proj_b, mixer.in_proj_a])
            mixer.decay_rate = -mixer.A_log.detach().float().exp()  # what transformers computes every call
            mixer.forward = partial(linear_attention, mixer, mixer.forward)
