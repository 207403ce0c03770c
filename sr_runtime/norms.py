"""The backbone's RMS norms in fewer ops: `install(model)` rebinds the `forward` of each norm
module instance to one built on `torch.nn.functional.rms_norm`.

A small request to a 64-layer model is bound by how many ops each layer dispatches, not by its
arithmetic, and transformers writes each RMS norm as 6-12 elementwise ops (upcast, pow, mean,
add, rsqrt, mul, the weight, the downcast). `rms_norm` is one fused kernel on CUDA; on CPU it
decomposes into the original's own ops in the original's order, so there only Qwen3.5's
`1 + weight` (a cast and an add, now made once) is saved, and every replacement is bitwise
equal to transformers' forward in float32, bfloat16 and float16 (tests/runtime/test_norms.py).
On CUDA the fused kernel sums in its own order, so the float32 value before each cast can
differ in its last bit; not measured there yet (a CPU emulation: 1 unit of the output dtype for
Qwen3.5's norm, up to 2-3 for the Llama and gated norms, whose second rounding after the weight
can double a unit; `pytest -m cuda tests/runtime/test_norms.py` checks those bounds on a GPU).
What each replacement keeps:

* `Qwen3_5RMSNorm` (decoder norms, q/k norms, the final norm): the norm and the weight in float32,
  one rounding to the input dtype, as transformers does; `1 + weight` in float32 is computed once
  here instead of on every call.
* `LlamaRMSNorm`: the norm in float32 rounded to the input dtype, then times the weight in the
  input dtype (two roundings, as transformers does). In float32 the weight goes into the fused
  norm, the same product.
* `Qwen3_5RMSNormGated` (Gated DeltaNet's output norm): as `LlamaRMSNorm`, then times
  silu(gate) in float32 and rounded once.

Each forward is a method bound to its module, so it reads the module's weight when it runs and a
deep copy of the model computes with the copy's. The one thing computed at install is
Qwen3.5's `1 + weight`: call install once the model is on its device and in its dtype, and do
not load other weights into it afterwards (the backbone never does). Modules already changed are
left alone, so a second call changes nothing; `remove(model)` undoes it (the tests compare both).
"""

from __future__ import annotations

from collections.abc import Callable
from types import MethodType
from typing import Any

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNorm, Qwen3_5RMSNormGated

# Set on each module whose forward was replaced, so install is idempotent and remove finds them.
MARK = "_sr_norm"
# Qwen3.5's 1 + weight in float32, a plain attribute (not a buffer: `model.to(bfloat16)` would round it).
SCALE = "_sr_scale"


def install(model: torch.nn.Module) -> int:
    """Replace the forward of every RMS norm module in `model`; the number of modules changed."""
    changed = 0
    for module in model.modules():
        forward = _FORWARDS.get(type(module))  # exact types: a subclass may compute something else
        if forward is None or getattr(module, MARK, False):
            continue
        if forward is zero_centred:
            weight: torch.Tensor = module.weight  # type: ignore[assignment]
            setattr(module, SCALE, 1.0 + weight.detach().float())  # the original's `1.0 + self.weight.float()`
        # An instance attribute shadows the class's forward: Module.__call__ reads self.forward.
        module.forward = MethodType(forward, module)
        setattr(module, MARK, True)
        changed += 1
    return changed


def remove(model: torch.nn.Module) -> int:
    """Give every module `install` changed its class's forward back; the number of modules."""
    changed = 0
    for module in model.modules():
        if getattr(module, MARK, False):
            for name in ("forward", MARK, SCALE):
                module.__dict__.pop(name, None)
            changed += 1
    return changed


def zero_centred(self: Qwen3_5RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """`Qwen3_5RMSNorm.forward`: x * rsqrt(mean(x^2) + eps) * (1 + weight), all in float32, then
    the input dtype."""
    scale: torch.Tensor = getattr(self, SCALE)
    # .float() is a no-op in float32; in half precision the norm must see float32 input, since
    # rms_norm of a bf16 tensor rounds the normalised value before the weight.
    return F.rms_norm(x.float(), scale.shape, scale, self.eps).to(x.dtype)


def llama(self: LlamaRMSNorm, x: torch.Tensor) -> torch.Tensor:
    """`LlamaRMSNorm.forward`: weight * (x * rsqrt(mean(x^2) + eps) in float32, rounded to the
    input dtype)."""
    return weighted(x, self.weight, self.variance_epsilon)


def gated(self: Qwen3_5RMSNormGated, hidden_states: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """`Qwen3_5RMSNormGated.forward`: (weight * norm(x), rounded as `llama`) * silu(gate) in
    float32, then the input dtype."""
    normed = weighted(hidden_states, self.weight, self.variance_epsilon)
    # silu of the float32 gate, not of the half one: silu of a bf16 tensor rounds its output.
    return (normed * F.silu(gate.float())).to(hidden_states.dtype)


def weighted(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * rms_norm(x) with the rounding of LlamaRMSNorm (and of the gated norm's first half)."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)  # no rounding in between: the same product
    # rms_norm of a half tensor computes in float32 and rounds once, as the original's
    # `.to(input_dtype)`; the weight then multiplies in the input dtype, as it does there.
    return weight * F.rms_norm(x, weight.shape, None, eps)


_FORWARDS: dict[type[torch.nn.Module], Callable[..., Any]] = {
    Qwen3_5RMSNorm: zero_centred,
    LlamaRMSNorm: llama,
    Qwen3_5RMSNormGated: gated,
}
