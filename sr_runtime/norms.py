"""The backbone's RMS norms in fewer ops: `install(model)` rebinds the `forward` of each norm
module instance to one built on `torch.nn.functional.rms_norm`.

A small request to a 64-layer model is bound by how many ops each layer dispatches, not by its
arithmetic, and transformers writes each RMS norm as 7-13 elementwise ops (upcast, pow, mean,
add, rsqrt, mul, the weight, the downcast). `rms_norm` is one fused kernel on CUDA; on CPU it
decomposes into the same ops as the original, so there only what is precomputed (the
zero-centred weight) or folded (the float32 casts) is saved. What each replacement keeps:

* `Qwen3_5RMSNorm` (decoder norms, q/k norms, the final norm): the norm and the weight in float32,
  one rounding to the input dtype, as transformers does; `1 + weight` in float32 is computed once
  here instead of on every call.
* `LlamaRMSNorm`: the norm in float32 rounded to the input dtype, then times the weight in the
  input dtype (two roundings, as transformers does). In float32 the weight goes into the fused
  norm, the same product.
* `Qwen3_5RMSNormGated` (Gated DeltaNet's output norm): as `LlamaRMSNorm`, then times
  silu(gate) in float32 and rounded once.

Weights are read at install: call it once the model is on its device and in its dtype, and do
not load other weights into it afterwards (the backbone never does). Modules already changed are
left alone, so a second call changes nothing; `remove(model)` undoes it (the tests compare both).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNorm, Qwen3_5RMSNormGated

# Set on each module whose forward was replaced, so install is idempotent.
MARK = "_sr_norm"


def install(model: torch.nn.Module) -> int:
    """Replace the forward of every RMS norm module in `model`; the number of modules changed."""
    changed = 0
    for module in model.modules():
        make = _BUILDERS.get(type(module))  # exact types: a subclass may compute something else
        if make is None or getattr(module, MARK, False):
            continue
        # An instance attribute shadows the class's forward: Module.__call__ reads self.forward.
        module.forward = make(module)
        setattr(module, MARK, True)
        changed += 1
    return changed


def remove(model: torch.nn.Module) -> int:
    """Give every module `install` changed its class's forward back; the number of modules."""
    changed = 0
    for module in model.modules():
        if getattr(module, MARK, False):
            del module.forward, module._sr_norm
            changed += 1
    return changed


def zero_centred(module: Qwen3_5RMSNorm) -> Callable[[torch.Tensor], torch.Tensor]:
    """x * rsqrt(mean(x^2) + eps) * (1 + weight), all in float32, then the input dtype."""
    scale = 1.0 + module.weight.detach().float()  # the original's `1.0 + self.weight.float()`, once
    shape, eps = (scale.shape[-1],), float(module.eps)

    def forward(x: torch.Tensor) -> torch.Tensor:
        # .float() is a no-op in float32; in half precision the norm must see float32 input,
        # since rms_norm of a bf16 tensor rounds the normalised value before the weight.
        return F.rms_norm(x.float(), shape, scale, eps).to(x.dtype)

    return forward


def llama(module: LlamaRMSNorm) -> Callable[[torch.Tensor], torch.Tensor]:
    """weight * (x * rsqrt(mean(x^2) + eps) in float32, rounded to the input dtype)."""
    return weighted(module.weight, float(module.variance_epsilon))


def gated(module: Qwen3_5RMSNormGated) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """(weight * norm(x), rounded as `llama`) * silu(gate) in float32, then the input dtype."""
    norm = weighted(module.weight, float(module.variance_epsilon))

    def forward(hidden_states: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        # silu of the float32 gate, not of the half one: silu of a bf16 tensor rounds its output.
        return (norm(hidden_states) * F.silu(gate.float())).to(hidden_states.dtype)

    return forward


def weighted(weight: torch.Tensor, eps: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """`LlamaRMSNorm.forward` (also the first half of the gated norm) for `weight` and `eps`."""
    shape = (weight.shape[-1],)

    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and weight.dtype == torch.float32:
            return F.rms_norm(x, shape, weight, eps)  # no rounding in between: the same product
        # rms_norm of a half tensor computes in float32 and rounds once, as the original's
        # `.to(input_dtype)`; the weight then multiplies in the input dtype, as it does there.
        return weight * F.rms_norm(x, shape, None, eps)

    return forward


_BUILDERS: dict[type[torch.nn.Module], Callable[..., Callable[..., torch.Tensor]]] = {
    Qwen3_5RMSNorm: zero_centred,
    LlamaRMSNorm: llama,
    Qwen3_5RMSNormGated: gated,
}
