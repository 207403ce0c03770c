"""Projections that read the same input, multiplied as one matrix: fewer, wider GEMMs.

A decoder layer's MLP reads its input through `gate_proj` and `up_proj`; a Gated DeltaNet layer
through `in_proj_qkv`, `in_proj_z`, `in_proj_b` and `in_proj_a` (sr_runtime/one_pass.py). Each
GEMM is a kernel launch, and on a small request launches, not arithmetic, are most of the time
(docs/runtime/gpu.md). At load each group's weights are laid end to end in one tensor and the
modules' own weights become views of it, so no memory is added and every other code path
(transformers' forwards, the reference path) reads the same numbers; a fused forward multiplies
once and splits the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch


def fuse(projections: Sequence[torch.nn.Linear]) -> torch.Tensor | None:
    """[sum of outputs, inputs]: the projections' weights end to end, each module's weight now a
    view of its rows. None (nothing changed) where one has a bias: they stay separate GEMMs."""
    if any(p.bias is not None for p in projections):
        return None
    weight = torch.cat([p.weight.detach() for p in projections])
    start = 0
    for p in projections:
        p.weight = torch.nn.Parameter(weight[start : start + p.out_features], requires_grad=False)
        start += p.out_features
    return weight


def mlp(module: Any, gate_up: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """down(act(gate(x)) * up(x)), gate and up one GEMM."""
    gate, up = torch.nn.functional.linear(x, gate_up).chunk(2, dim=-1)
    return module.down_proj(module.act_fn(gate) * up)


def install(model: Any) -> int:
    """Fuse every decoder layer's MLP gate and up projections; how many layers were fused."""
    fused = 0
    for layer in model.base_model.layers:
        module = layer.mlp
        gate_up = fuse([module.gate_proj, module.up_proj])
        if gate_up is not None:
            module.forward = partial(mlp, module, gate_up)
            fused += 1
    return fused
