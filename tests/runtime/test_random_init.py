"""Random weights made on the device (benchmarks of shapes no checkpoint holds): a preset folder
without weight files, and `Engine.load(..., random_init=SEED)` building every weight from its
configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from sr_runtime.engine import Engine
from sr_runtime.errors import CheckpointError
from sr_runtime.presets import create
from sr_runtime.types import ChoiceQuestion, DecisionRequest, NoulQuestion, Result, SetQuestion

from .conftest import SEED_002_STATE

REQUEST = DecisionRequest(
    SEED_002_STATE,
    (
        NoulQuestion("Does the user report a problem that blocks their work?"),
        ChoiceQuestion((("billing", None), ("engineering", None), ("other", None)), "Which team?"),
        SetQuestion((("bug", None), ("refund", None)), "Which tags apply?"),
    ),
)


def answers(result: Result) -> list[str]:
    return [repr(a) for a in result.answers]


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hybrid-vision-heads as configs and tokenizer only: backbone, tower, heads and readout all random."""
    return create(tmp_path_factory.mktemp("bare") / "bare", "hybrid-vision-heads", seed=0, weights=False)


def test_a_preset_without_weights_writes_no_weight_file_and_the_same_configs(
    bare: Path, checkpoints: dict[str, Path]
) -> None:
    assert not list(bare.rglob("*.safetensors"))
    whole = checkpoints["hybrid-vision-heads"]
    for name in ("config.json", "vision/config.json", "decision_config.json", "tokenizer.json"):
        assert json.loads((bare / name).read_text()) == json.loads((whole / name).read_text()), name
    with pytest.raises(CheckpointError, match="no readout.safetensors"):
        Engine.load(bare)  # without random_init the weights are required


def test_random_init_builds_every_weight_in_the_dtype_and_a_seed_gives_the_same_answers(bare: Path) -> None:
    engine = Engine.load(bare, dtype="bfloat16", random_init=7)
    assert engine.dtype == torch.bfloat16 and engine.card().dtype == "bfloat16"
    assert {p.dtype for p in engine.backbone.model.parameters()} == {torch.bfloat16}
    assert engine.vision is not None and engine.heads is not None  # the tower and heads are made too
    first = engine.answer(REQUEST)
    assert answers(first) == answers(Engine.load(bare, dtype="bfloat16", random_init=7).answer(REQUEST))
    assert answers(first) != answers(Engine.load(bare, dtype="bfloat16", random_init=8).answer(REQUEST))


def test_a_seed_gives_the_same_weights_in_every_dtype_rounded(bare: Path) -> None:
    """So a bfloat16 engine can be held to a float32 one on the same weights (bench/gpu.py)."""
    ours, fp32 = Engine.load(bare, dtype="float16", random_init=3), Engine.load(bare, dtype="float32", random_init=3)
    pairs = zip(ours.backbone.model.named_parameters(), fp32.backbone.model.named_parameters(), strict=True)
    assert all(a == b and torch.equal(w, w32.to(w.dtype)) for (a, w), (b, w32) in pairs)
    assert torch.equal(ours.readout, fp32.readout)  # the readout_dtype, float32 either way


def test_a_model_whose_float32_weights_do_not_fit_is_made_in_its_dtype(
    bare: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(a 27B shape on a smaller GPU): the float32 build runs out of memory, the dtype's does not."""
    from sr_runtime import backbone

    build = backbone.AutoModelForCausalLM.from_config

    def tight(config: Any, dtype: torch.dtype, **kwargs: Any) -> Any:
        if dtype == torch.float32:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return build(config, dtype=dtype, **kwargs)

    monkeypatch.setattr(backbone.AutoModelForCausalLM, "from_config", tight)
    engine = Engine.load(bare, dtype="bfloat16", random_init=7)
    assert {p.dtype for p in engine.backbone.model.parameters()} == {torch.bfloat16}
    assert len(engine.answer(REQUEST).answers) == 3


def test_random_init_takes_the_shape_from_config_json(bare: Path, tmp_path: Path) -> None:
    """bench/gpu.py edits config.json (a 27B shape's head counts) before loading: those dims hold."""
    wider = create(tmp_path / "wider", "hybrid-prefix-bidir", seed=0, hidden=96, layers=8, weights=False)
    engine = Engine.load(wider, random_init=0)
    assert engine.backbone.hidden_size == 96 and len(engine.backbone.kinds) == 8
    assert engine.backbone.kinds.count("full_attention") == 2  # three linear layers to one full
    assert engine.readout.shape == (255, 96)
    assert len(engine.answer(REQUEST).answers) == 3
