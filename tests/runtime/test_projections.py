"""Projections that read the same input, fused into one matrix at load: the same numbers, one
GEMM, no memory added."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from sr_runtime.backbone import Backbone
from sr_runtime.projections import fuse


@pytest.mark.parametrize("preset", ["hybrid-prefix-bidir", "llama-causal"])
def test_a_backbone_with_fused_projections_computes_what_transformers_does(
    checkpoints: dict[str, Path], preset: str
) -> None:
    backbone = Backbone.load(checkpoints[preset])
    plain = AutoModelForCausalLM.from_pretrained(checkpoints[preset], attn_implementation="sdpa").eval()
    layers = backbone.model.base_model.layers
    for layer in layers:  # every MLP's gate and up weights are rows of one tensor now
        gate, up = layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight
        assert gate.untyped_storage().data_ptr() == up.untyped_storage().data_ptr()
        if hasattr(layer, "linear_attn"):
            mixer = layer.linear_attn
            assert mixer.in_proj.shape[0] == sum(
                p.out_features for p in (mixer.in_proj_qkv, mixer.in_proj_z, mixer.in_proj_b, mixer.in_proj_a)
            )
    ids = torch.randint(0, plain.config.vocab_size, (2, 37))
    with torch.inference_mode():
        ours = backbone.model.base_model(input_ids=ids, use_cache=False).last_hidden_state
        theirs = plain.base_model(input_ids=ids, use_cache=False).last_hidden_state
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_projections_with_a_bias_stay_apart() -> None:
    with_bias, without = torch.nn.Linear(8, 4), torch.nn.Linear(8, 3, bias=False)
    before = with_bias.weight.data_ptr(), without.weight.data_ptr()
    assert fuse([with_bias, without]) is None
    assert (with_bias.weight.data_ptr(), without.weight.data_ptr()) == before
    a, b = torch.nn.Linear(8, 4, bias=False), torch.nn.Linear(8, 3, bias=False)
    x = torch.randn(5, 8)
    expected = torch.cat([a(x), b(x)], dim=-1)
    weight = fuse([a, b])
    assert weight is not None and weight.shape == (7, 8)
    # One wider GEMM may sum in another order than two: equal to float rounding, not bit for bit.
    assert torch.allclose(torch.nn.functional.linear(x, weight), expected, atol=1e-6)
    assert torch.equal(a(x), expected[:, :4]) and torch.equal(b(x), expected[:, 4:])  # the views are the weights
