"""Device and kernel choices: the weights' dtype, and which attention kernels a pass may use.

Everything that differs between CPU and CUDA lives here, so the rest of the runtime is one code
path and the CPU tests exercise it:

* `resolve_dtype`: `--dtype auto` is the checkpoint's `torch_dtype`, bfloat16 on CUDA where the
  checkpoint says float32 (tensor cores), and float32 on CPU (bf16 matmuls are slower there).
* `attend`: attention that also returns each query's log-sum-exp (the shared-prefix merge needs
  it). CPU: PyTorch's fused flash kernel for CPU. CUDA: the flash kernel when there is no mask
  and the dtype is half precision, else the memory-efficient kernel with the mask as an additive
  bias. Neither holds the [queries, keys] scores, so a 117K-token state costs memory linear in it.
* `attention_kernels`: the context every backbone pass on CUDA runs in; SDPA may pick the flash
  or memory-efficient kernel only, so a pass that would fall back to the math kernel (which holds
  the scores whole: 72 GiB at 24K tokens in fp32) raises instead of running out of memory.
* `linear_attention_kernel`: flash-linear-attention's chunked gated delta rule when installed
  (transformers binds `chunk_gated_delta_rule` from `fla` itself), else transformers' torch one.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch

from sr_runtime.types import DTYPES, device_token_budget

_BY_NAME = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# Flash (FA2) in PyTorch's SDPA reads head dims up to 256, in half precision only.
FLASH_HEAD_DIM = 256
# The memory-efficient kernel reads its bias with rows aligned to this many elements.
BIAS_ALIGN = 16


def resolve_dtype(requested: str, checkpoint: torch.dtype | str | None, device: torch.device | str) -> torch.dtype:
    """The dtype weights and activations run in; ValueError (one line) for an unknown name."""
    if requested not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, not {requested!r}")
    if requested != "auto":
        return _BY_NAME[requested]
    if torch.device(device).type == "cpu":
        return torch.float32
    declared = _BY_NAME.get(str(checkpoint).removeprefix("torch."), torch.float32)
    return torch.bfloat16 if declared == torch.float32 else declared


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> "bfloat16", as the card and /health say it."""
    return str(dtype).removeprefix("torch.")


def batch_state_prefills(device: torch.device | str) -> bool:
    """Whether the distinct states of a call are prefilled together (left-padded, a pass per
    token budget) rather than one pass each. On CUDA one pass of many states is a few large
    GEMMs instead of many small ones and their launches; on CPU each state's GEMMs are large
    enough already and padding would be work for nothing."""
    return torch.device(device).type == "cuda"


def default_token_budget(device: torch.device | str) -> int:
    """Tokens of one pass when the operator gives none (sr_runtime/types.py says how many): on
    CUDA 32 requests of 512-token states share one pass."""
    return device_token_budget(torch.device(device).type)


def linear_attention_kernel(device: torch.device | str) -> str:
    """ "fla" where flash-linear-attention runs the linear-attention layers, else "torch"."""
    if torch.device(device).type != "cuda" or importlib.util.find_spec("fla") is None:
        return "torch"
    return "fla"


def attention_kernels(device: torch.device) -> AbstractContextManager[None]:
    """On CUDA, SDPA restricted to the flash and memory-efficient kernels; elsewhere nothing."""
    if device.type != "cuda":
        return nullcontext()
    return _fused_only()


@contextmanager
def _fused_only() -> Iterator[None]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        yield


def state_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, keys: torch.Tensor | None, causal: bool, scale: float
) -> torch.Tensor:
    """A state block's attention, [B, S, H, d] as transformers' SDPA returns it: SDPA with no
    mask (`is_causal` under causal), or under prefix_bidir with `keys` ([B, 1, 1, S] additive,
    hiding left padding) broadcast over queries, never an [S, S] tensor. Keys and values are
    repeated to the query heads first (SDPA's memory-efficient kernel reads no grouped heads;
    the flash kernel reads them either way). On CUDA inside `attention_kernels`: flash without
    a mask in half precision, else memory-efficient."""
    group = query.shape[1] // key.shape[1]
    if group > 1:
        key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=keys, is_causal=causal and keys is None, scale=scale
    )
    return out.transpose(1, 2).contiguous()


def attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax(Q K^T * scale + bias) V, float32 log-sum-exp of each query's scores): [N, H, L, d], [N, H, L].

    Q, K and V have the same head count; `bias` is additive, broadcast over heads."""
    if query.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, False, attn_mask=bias, scale=scale
        )
        return out, lse
    if query.device.type == "cuda":
        return _attend_cuda(query, key, value, bias, scale)
    return plain_attend(query, key, value, bias, scale)


def _attend_cuda(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    length, d = query.shape[-2:]
    if d % 8:  # both fused kernels read head dims in multiples of 8 (SDPA pads them; we do not)
        return plain_attend(query, key, value, bias, scale)
    if bias is None and query.dtype in (torch.float16, torch.bfloat16) and d <= FLASH_HEAD_DIM:
        # (out, logsumexp [N, H, L] float32, cum_seq_q, cum_seq_k, max_q, max_k, seed, offset, debug)
        flash = torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, 0.0, False, False, scale=scale)
        return flash[0], flash[1]
    if bias is not None:
        bias = aligned_bias(bias).expand(query.shape[0], query.shape[1], length, key.shape[-2])
    # (out, logsumexp [N, H, ceil(L / 32) * 32] float32, seed, offset)
    efficient = torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, bias, True, 0.0, False, scale=scale
    )
    return efficient[0], efficient[1][..., :length]


def aligned_bias(bias: torch.Tensor) -> torch.Tensor:
    """`bias` as a view whose rows start every BIAS_ALIGN elements (the memory-efficient kernel
    reads rows that way; SDPA pads its masks alike). Allocated once and reused, as the masks are."""
    keys = bias.shape[-1]
    if bias.stride(-1) == 1 and bias.stride(-2) % BIAS_ALIGN == 0:
        return bias
    padded = bias.new_zeros(*bias.shape[:-1], -(-keys // BIAS_ALIGN) * BIAS_ALIGN)
    padded[..., :keys] = bias
    return padded[..., :keys]


def plain_attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`attend` on any device, the scores held whole (in float32)."""
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias.float()
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.exp(scores - lse[..., None]), value.float()).to(query.dtype), lse
