"""The transformer backbone, read as hidden states: a state prefill, question rows, whole prompts.

Backbones come through `transformers`: Llama-style models (every layer full attention) and
Qwen3.5-style hybrids (Gated DeltaNet linear layers plus full-attention layers). Masks go to
full-attention layers only; linear layers are causal recurrences and read no mask.

State once: a state prefill keeps, at the boundary S, each full-attention layer's K/V (after
RoPE) and each linear layer's conv window and recurrent state (a `StateSnapshot`). Question
rows continue from snapshots, one question per row (a recurrence cannot keep two questions in
one row apart), with positions S, S+1, ... and right padding: each row gets its own copy of
the recurrent states, while attention layers read a state's K/V in place (shared_prefix.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache, PreTrainedModel
from transformers.cache_utils import CacheLayerMixin, LinearAttentionCacheLayerMixin
from transformers.utils import logging as hf_logging

from sr_runtime import norms, projections
from sr_runtime.errors import CheckpointError
from sr_runtime.kernels import attention_kernels
from sr_runtime.mask import AttentionMode, padded_prompt_mask, prompt_mask, question_mask
from sr_runtime.one_pass import OnePass, install
from sr_runtime.prompt import MediaSpan
from sr_runtime.shared_prefix import ATTENTION, LastTokenTail, SharedPrefix, StatePass, blocks, masked

BACKBONES = ("llama", "qwen3_5_text")
LAYER_KINDS = ("full_attention", "linear_attention")
# A mask transformers takes as made (4-D) and never reads: a llama pass whose attention reads
# `StatePass` or `OnePass` instead, so that no [T, T] mask is built for it.
_NO_MASK = torch.zeros(1, 1, 1, 1, dtype=torch.bool)


@dataclass(frozen=True, eq=False, slots=True)
class AttentionState:
    keys: torch.Tensor  # [1, kv_heads, S, head_dim], RoPE applied
    values: torch.Tensor  # [1, kv_heads, S, head_dim]

    @property
    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.keys, self.values)


@dataclass(frozen=True, eq=False, slots=True)
class RecurrentState:
    conv: torch.Tensor  # [1, conv_dim, kernel]: the last pre-conv inputs
    recurrent: torch.Tensor  # [1, heads, k_dim, v_dim]: the delta-rule state after the last token

    @property
    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.conv, self.recurrent)


LayerState = AttentionState | RecurrentState


@dataclass(frozen=True, eq=False, slots=True)
class StateSnapshot:
    """Every layer's state at the end of a state block of `length` tokens."""

    length: int
    layers: tuple[LayerState, ...]
    hidden: torch.Tensor  # [S, hidden]: the last layer's output on the state (span heads read it)

    @property
    def nbytes(self) -> int:
        tensors = [t for layer in self.layers for t in layer.tensors] + [self.hidden]
        return sum(t.numel() * t.element_size() for t in tensors)


class Backbone:
    """A causal LM's decoder stack and its LM head, with the passes the engine needs."""

    def __init__(self, model: PreTrainedModel, device: torch.device) -> None:
        # Question rows read their state's keys and values in place (sr_runtime/shared_prefix.py);
        # every other pass is plain SDPA.
        model.set_attn_implementation(ATTENTION)
        install(model)  # linear-attention layers read a state and its rows in one pass too
        projections.install(model)  # each MLP's gate and up projections one GEMM
        norms.install(model)  # RMS norms as torch's rms_norm: one kernel each on CUDA
        self.model = model
        self.device = device
        self.config = model.config
        self.kinds: tuple[str, ...] = tuple(
            getattr(self.config, "layer_types", None) or ["full_attention"] * self.config.num_hidden_layers
        )
        self.hybrid = "linear_attention" in self.kinds
        self.hidden_size: int = self.config.hidden_size
        # The layer after which only each row's last token is read, when it is full attention.
        self.read_layer = len(self.kinds) - 1 if self.kinds[-1] == "full_attention" else -1
        self.tail = LastTokenTail(model, self.read_layer) if self.read_layer >= 0 else None

    @property
    def dtype(self) -> torch.dtype:
        """The weights' and activations' dtype (every pass runs in it)."""
        return self.model.dtype

    @classmethod
    def load(
        cls, path: Path, device: str = "cpu", dtype: torch.dtype = torch.float32, random_init: int | None = None
    ) -> Backbone:
        """The checkpoint's weights in `dtype` on `device`; with `random_init` (a seed) none are
        read: the model is built from config.json right on the device, initialised at random
        the way transformers initialises it (benchmarks of shapes no file holds)."""
        # Start-up noise (weight-loading progress bars, "falling back to the PyTorch GDN kernel")
        # would bury the one line an operator needs; transformers errors still raise.
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        if config.model_type not in BACKBONES:
            raise CheckpointError(
                f"unsupported backbone model_type {config.model_type!r} in {path}/config.json "
                f"(supported: {', '.join(BACKBONES)})"
            )
        kinds = getattr(config, "layer_types", None) or []
        odd = sorted(set(kinds) - set(LAYER_KINDS))
        if odd:
            raise CheckpointError(
                f"unsupported layer types {odd} in {path}/config.json (supported: {', '.join(LAYER_KINDS)})"
            )
        target = torch.device(device)
        if random_init is not None:
            torch.manual_seed(random_init)  # every device's generator
            # Parameters are created and initialised on the device (a 27B shape never exists in
            # host memory), in float32 and then cast tensor by tensor: a seed gives the same
            # weights in every dtype, rounded, so a bfloat16 engine is compared with a float32
            # one on the same weights. Peak device memory is the float32 model's (27B: 108 GB);
            # where that does not fit, the weights are made in `dtype` directly (another draw).
            try:
                with target:
                    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
            except torch.OutOfMemoryError:
                if target.type == "cuda":
                    torch.cuda.empty_cache()
                torch.manual_seed(random_init)
                with target:
                    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
            return cls(model.to(dtype).eval(), target)
        try:
            model = AutoModelForCausalLM.from_pretrained(
                path, dtype=dtype, attn_implementation="sdpa", local_files_only=True
            )
        except (OSError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"cannot load the weights in {path}: {exc}".splitlines()[0]) from None
        # transformers decorates PreTrainedModel.to with functools.wraps(Module.to), and typeshed's
        # _Wrapped keeps the unbound signature, so a checker wants the model as the first argument.
        return cls(model.to(target).eval(), target)  # type: ignore[arg-type]

    def lm_head_rows(self, token_ids: Sequence[int]) -> torch.Tensor:
        """[codes, hidden]: the zero-shot readout is the LM head's rows of the answer-code tokens."""
        head = self.model.get_output_embeddings().weight
        return head[torch.tensor(list(token_ids), device=head.device)].detach().clone()

    def _masks(self, mask: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor | None]:
        mask = mask.to(self.device)
        if self.hybrid:
            return {"full_attention": mask, "linear_attention": None}
        return mask

    def _ids(self, rows: Sequence[Sequence[int]], width: int) -> torch.Tensor:
        """[B, width] token ids, each row right-padded with 0 (padding is never read)."""
        return torch.tensor([[*row, *[0] * (width - len(row))] for row in rows], dtype=torch.long, device=self.device)

    def _inputs(
        self, rows: Sequence[Sequence[int]], width: int, media: Sequence[Sequence[MediaSpan]] = ()
    ) -> dict[str, torch.Tensor]:
        """The model's inputs: token ids, or with media the embeddings, each asset's rows in place."""
        ids = self._ids(rows, width)
        if not any(media):
            return {"input_ids": ids}
        x = self.model.get_input_embeddings()(ids)  # [B, W, hidden]
        for b, spans in enumerate(media):
            for span in spans:
                x[b, span.start : span.start + len(span)] = span.embeds.to(x.device, x.dtype)
        return {"inputs_embeds": x}

    def _state_masks(self, mode: AttentionMode) -> torch.Tensor | dict[str, torch.Tensor | None] | None:
        """What transformers gets as the mask of a state pass: nothing to build (full-attention
        layers read `StatePass`; linear layers take none)."""
        return {"full_attention": None, "linear_attention": None} if self.hybrid else None

    @torch.inference_mode()
    def prefill(self, ids: Sequence[int], mode: AttentionMode, media: Sequence[MediaSpan] = ()) -> StateSnapshot:
        """Run a state block once and keep every layer's state at its end."""
        cache = DynamicCache(config=self.config)
        n = len(ids)
        with attention_kernels(self.device):
            out = self.model.base_model(
                **self._inputs([ids], n, [media]),
                attention_mask=self._state_masks(mode),
                past_key_values=cache,
                use_cache=True,
                state_pass=StatePass(bidirectional=mode == "prefix_bidir"),
            )
        return self._snapshots(cache, [n], n, out.last_hidden_state)[0]

    @torch.inference_mode()
    def prefill_many(
        self, states: Sequence[Sequence[int]], mode: AttentionMode, media: Sequence[Sequence[MediaSpan]] = ()
    ) -> list[StateSnapshot]:
        """Several state blocks in one pass (prefix_bidir only), each as `prefill` would keep it.

        Rows are left-padded, so every row ends at the last column: each linear layer's conv
        window and recurrent state at that column are the row's own (padding inputs are zeroed
        before every linear layer, so a recurrence starts from zero at a row's first token, as
        alone), and positions count from each row's first token. Full-attention layers hide the
        padding keys with a [B, 1, 1, W] bias; padding queries are never read."""
        if mode != "prefix_bidir":
            raise ValueError("states are prefilled together under prefix_bidir only")
        lens = [len(s) for s in states]
        width = max(lens)
        pads = [width - n for n in lens]
        rows = torch.tensor(pads, device=self.device)[:, None]
        columns = torch.arange(width, device=self.device)[None, :]
        real = columns >= rows  # [B, W]
        keys = None
        if any(pads):
            keys = torch.zeros(len(states), 1, 1, width, dtype=self.dtype, device=self.device)
            keys.masked_fill_(~real[:, None, None, :], masked(self.dtype))
        shifted = [[MediaSpan(m.start + pad, m.embeds, m.digest) for m in spans] for spans, pad in zip(media, pads)]
        cache = DynamicCache(config=self.config)
        with attention_kernels(self.device):
            out = self.model.base_model(
                **self._inputs([[0] * pad + list(s) for s, pad in zip(states, pads)], width, shifted),
                attention_mask={"full_attention": None, "linear_attention": real} if self.hybrid else None,
                position_ids=(columns - rows).clamp_min(0),
                past_key_values=cache,
                use_cache=True,
                state_pass=StatePass(bidirectional=True, keys=keys),
            )
        return self._snapshots(cache, lens, width, out.last_hidden_state)

    def _snapshots(
        self, cache: DynamicCache, lens: Sequence[int], width: int, hidden: torch.Tensor
    ) -> list[StateSnapshot]:
        """Each row's StateSnapshot from a state pass's cache (rows left-padded to `width`):
        its own copies, so a cached state never holds the rest of the pass."""
        alone = len(lens) == 1
        snapshots: list[list[LayerState]] = [[] for _ in lens]
        for i, kind in enumerate(self.kinds):
            # The cache holds either kind of layer; the config's layer_types say which each is,
            # and the forward pass has filled every one.
            layer = cache.layers[i]
            if kind == "linear_attention":
                assert isinstance(layer, LinearAttentionCacheLayerMixin)
                conv, recurrent = layer.conv_states[0], layer.recurrent_states[0]
                assert conv is not None and recurrent is not None
                for b in range(len(lens)):
                    snapshots[b].append(
                        RecurrentState(conv, recurrent)
                        if alone
                        else RecurrentState(conv[b : b + 1].clone(), recurrent[b : b + 1].clone())
                    )
            else:
                assert isinstance(layer, CacheLayerMixin) and layer.keys is not None and layer.values is not None
                for b, n in enumerate(lens):
                    snapshots[b].append(
                        AttentionState(layer.keys, layer.values)
                        if alone
                        else AttentionState(
                            layer.keys[b : b + 1, :, width - n :].clone(),
                            layer.values[b : b + 1, :, width - n :].clone(),
                        )
                    )
        return [
            StateSnapshot(n, tuple(layers), hidden[b, width - n :] if not alone else hidden[0])
            for b, (n, layers) in enumerate(zip(lens, snapshots))
        ]

    def _rows_cache(self, states: Sequence[StateSnapshot], groups: Sequence[int]) -> DynamicCache:
        """A cache of each row's recurrent state (a recurrence updates its own copy, so one a row,
        made once for the pass); attention layers stay empty, as rows read their state in place."""
        cache = DynamicCache(config=self.config)
        for i, kind in enumerate(self.kinds):
            if kind != "linear_attention":
                continue
            parts: list[RecurrentState] = [s.layers[i] for s in states]  # type: ignore[misc]  # a linear_attention layer's state is a RecurrentState
            conv = torch.cat([parts[g].conv for g in groups])
            cache.update_conv_state(conv, i, conv_kernel_size=conv.shape[-1])
            cache.update_recurrent_state(torch.cat([parts[g].recurrent for g in groups]), i)
        return cache

    @torch.inference_mode()
    def question_rows(
        self,
        states: Sequence[StateSnapshot],
        questions: Sequence[Sequence[int]],
        mode: AttentionMode,
        budget: int,
        media: Sequence[Sequence[MediaSpan]] = (),
    ) -> torch.Tensor:
        """[B, hidden]: the last hidden state of each question, each continuing its own state.

        Rows of one state should sit together: each run of them reads that state's keys and
        values in place (sr_runtime/shared_prefix.py; `blocks` says how long a run may be).
        """
        distinct: list[StateSnapshot] = []
        groups: list[int] = []  # row -> index in distinct
        for state in states:
            if not distinct or distinct[-1] is not state:
                distinct.append(state)
            groups.append(len(distinct) - 1)
        question_lens = [len(q) for q in questions]
        qw = max(question_lens)
        positions = (torch.tensor([s.length for s in states])[:, None] + torch.arange(qw)).to(
            self.device
        )  # S_b, S_b + 1, ...
        last = torch.tensor(question_lens, device=self.device) - 1
        # A full_attention layer's state is an AttentionState: its tensors are (keys, values).
        kv: dict[int, Sequence[tuple[torch.Tensor, torch.Tensor]]] = {
            i: [s.layers[i].tensors for s in distinct]  # type: ignore[misc]
            for i, kind in enumerate(self.kinds)
            if kind == "full_attention"
        }
        prefix = SharedPrefix(
            kv=kv,
            blocks=blocks(groups, [s.length for s in distinct], qw, budget),
            mask=question_mask(mode, question_lens, qw).to(self.device),
            # Only the last token of each row is read out: the last layer attends for it alone.
            read_layer=self.read_layer,
            last=last,
        )
        with self.tail.reading(last) if self.tail is not None else nullcontext(), attention_kernels(self.device):
            out = self.model.base_model(
                **self._inputs(questions, qw, media),
                # The question mask goes to the attention layers through `prefix`; transformers sees the
                # [B, 1, Qw, Qw] block alone, the keys its cache holds.
                attention_mask=self._masks(prefix.mask),
                position_ids=positions,
                past_key_values=self._rows_cache(distinct, groups),
                use_cache=True,
                shared_prefix=prefix,
            ).last_hidden_state
        if self.tail is not None:
            return out[:, 0]  # [B, 1, hidden]: the last token of each row alone
        return out[torch.arange(len(questions), device=self.device), last]

    @torch.inference_mode()
    def state_and_questions(
        self,
        state: Sequence[int],
        questions: Sequence[Sequence[int]],
        mode: AttentionMode,
        budget: int,
        media: Sequence[MediaSpan] = (),
        question_media: Sequence[Sequence[MediaSpan]] = (),
    ) -> tuple[StateSnapshot, torch.Tensor]:
        """`prefill` and then `question_rows` of its rows, in one pass (sr_runtime/one_pass.py):
        the state's snapshot, as `prefill` keeps it, and [B, hidden] as `question_rows` reads them."""
        s, qw = len(state), max(len(q) for q in questions)
        lens = [len(q) for q in questions]
        last = torch.tensor(lens, device=self.device) - 1  # each row's last token
        one = OnePass(
            state=s,
            rows=len(questions),
            width=qw,
            bidirectional=mode == "prefix_bidir",
            prefix=SharedPrefix(
                kv={},
                blocks=blocks([0] * len(questions), [s], qw, budget),
                mask=question_mask(mode, lens, qw).to(self.device),
                read_layer=self.read_layer,
                last=last,
            ),
        )
        # Read: the state's tokens (its snapshot keeps their last hidden states) and each row's last.
        ends = s + qw * torch.arange(len(questions), device=self.device) + last
        read = torch.cat([torch.arange(s, device=self.device), ends])
        ids = [*state, *(t for q in questions for t in [*q, *[0] * (qw - len(q))])]
        spans = [
            *media,
            *(MediaSpan(m.start + s + b * qw, m.embeds, m.digest) for b, q in enumerate(question_media) for m in q),
        ]
        positions = torch.cat([torch.arange(s), (s + torch.arange(qw)).repeat(len(questions))])
        tail = self.tail.reading_tokens(read, len(ids)) if self.tail is not None else nullcontext()
        with tail, attention_kernels(self.device):
            out = self.model.base_model(
                **self._inputs([ids], len(ids), [spans]),
                # Nothing for transformers to build: attention layers read `one`, linear ones no mask.
                attention_mask=self._state_masks(mode) if self.hybrid else _NO_MASK,
                position_ids=positions[None].to(self.device),
                use_cache=False,
                one_pass=one,
            ).last_hidden_state[0]
        layers: list[LayerState] = []
        for i, kind in enumerate(self.kinds):
            # Copies: a cached state must not hold the rest of the pass (its views would); the
            # linear layers' are their own already.
            if kind == "linear_attention":
                layers.append(RecurrentState(*one.recurrent[i]))
            else:
                keys, values = one.kv[i]
                layers.append(AttentionState(keys.clone(), values.clone()))
        rows = out[s:] if self.tail is not None else out[ends]
        return StateSnapshot(s, tuple(layers), out[:s].clone()), rows

    @torch.inference_mode()
    def prompt_hidden(
        self, prompt: Sequence[int], state_len: int, mode: AttentionMode, media: Sequence[MediaSpan] = ()
    ) -> torch.Tensor:
        """[L, hidden]: every position of one whole prompt under its dense mask, no cache."""
        with attention_kernels(self.device):
            return self.model.base_model(
                **self._inputs([prompt], len(prompt), [media]),
                attention_mask=self._masks(prompt_mask(mode, state_len, len(prompt) - state_len)[None, None]),
                use_cache=False,
            ).last_hidden_state[0]

    @torch.inference_mode()
    def prompt_rows(
        self,
        prompts: Sequence[Sequence[int]],
        state_lens: Sequence[int],
        mode: AttentionMode,
        media: Sequence[Sequence[MediaSpan]] = (),
        dense: bool = False,
    ) -> torch.Tensor:
        """[B, hidden]: whole prompts, no cache, each row under its own dense mask; under
        noncausal_full_attention (unless `dense`, the reference path) with none: every token
        reads its whole row, so a [B, 1, 1, W] bias hiding the right padding is the whole mask
        (linear layers are causal, so padding after a row never reaches it)."""
        lens = [len(p) for p in prompts]
        width = max(lens)
        if mode == "noncausal_full_attention" and not dense:
            keys = None
            if min(lens) < width:
                real = (
                    torch.arange(width, device=self.device)[None, :] < torch.tensor(lens, device=self.device)[:, None]
                )
                keys = torch.zeros(len(lens), 1, 1, width, dtype=self.dtype, device=self.device)
                keys.masked_fill_(~real[:, None, None, :], masked(self.dtype))
            with attention_kernels(self.device):
                out = self.model.base_model(
                    **self._inputs(prompts, width, media),
                    attention_mask=self._state_masks(mode),
                    use_cache=False,
                    state_pass=StatePass(bidirectional=True, keys=keys),
                ).last_hidden_state
        else:
            with attention_kernels(self.device):
                out = self.model.base_model(
                    **self._inputs(prompts, width, media),
                    attention_mask=self._masks(padded_prompt_mask(mode, list(state_lens), lens, width)),
                    use_cache=False,
                ).last_hidden_state
        last = torch.tensor(lens, device=self.device) - 1
        return out[torch.arange(len(prompts), device=self.device), last]
