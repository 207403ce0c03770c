"""decision_config.json and the start-up checks: every problem stops start-up with one clear line."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from sr_runtime.checkpoint import parse_decision_config, read_checkpoint
from sr_runtime.engine import Engine
from sr_runtime.errors import CheckpointError

Edit = Callable[[dict[str, Any]], None]


@pytest.fixture
def folder(checkpoints: dict[str, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(checkpoints["hybrid-prefix-bidir"], tmp_path / "ckpt"))


def _edit(folder: Path, edit: Edit) -> None:
    path = folder / "decision_config.json"
    raw = json.loads(path.read_text())
    edit(raw)
    path.write_text(json.dumps(raw))


def _set(**fields: Any) -> Edit:
    return lambda raw: raw.update(fields)


def _drop(name: str) -> Edit:
    return lambda raw: raw.pop(name)


def _swap_token_ids(raw: dict[str, Any]) -> None:
    raw["token_ids"][0], raw["token_ids"][1] = raw["token_ids"][1], raw["token_ids"][0]


def _rename_code(raw: dict[str, Any]) -> None:
    raw["codes"][3] = "Question"


CASES: list[tuple[str, Edit, str]] = [
    (
        "unknown attention mode",
        _set(attention_mode="x"),
        (
            "unsupported decision_config.json attention_mode 'x' (supported: causal, noncausal_full_attention, "
            "prefix_bidir)"
        ),
    ),
    (
        "unknown field",
        _set(rope_scaling_v2=True),
        "unsupported decision_config.json field 'rope_scaling_v2' (supported: ",
    ),
    (
        "unknown layout",
        _set(prompt_layout="header-v2"),
        "unsupported decision_config.json prompt_layout 'header-v2' (supported: d3, header-v1)",
    ),
    ("unknown prompt", _set(prompt="chatml"), "unsupported decision_config.json prompt 'chatml' (supported: d3)"),
    ("newer format", _set(format_version=2), "unsupported decision_config.json format_version 2 (supported: 1)"),
    ("bool format", _set(format_version=True), "unsupported decision_config.json format_version True (supported: 1)"),
    ("unknown pooling", _set(pooling="mean"), "unsupported decision_config.json pooling 'mean' (supported: last)"),
    ("unknown readout dtype", _set(readout_dtype="int8"), "unsupported decision_config.json readout_dtype 'int8'"),
    (
        "zero temperature",
        _set(temperature=0),
        "invalid decision_config.json temperature 0 (must be positive and finite)",
    ),
    (
        "negative temperature",
        _set(temperature=-1.5),
        "invalid decision_config.json temperature -1.5 (must be positive and finite)",
    ),
    (
        "bool temperature",
        _set(temperature=True),
        "invalid decision_config.json temperature True (must be positive and finite)",
    ),
    (
        "string temperature",
        _set(temperature="1.0"),
        "invalid decision_config.json temperature '1.0' (must be positive and finite)",
    ),
    ("missing field", _drop("attention_mode"), "decision_config.json is missing 'attention_mode'"),
    (
        "one code",
        _set(codes=["A"], token_ids=[0]),
        "invalid decision_config.json codes (must be a list of 2 to 255 strings)",
    ),
    (
        "duplicate codes",
        _set(codes=["A", "A"], token_ids=[1, 1]),
        "invalid decision_config.json codes: 'A' listed twice",
    ),
    (
        "ids and codes differ in length",
        _set(codes=["A", "B", "C"], token_ids=[1, 2]),
        "decision_config.json has 3 codes but 2 token_ids",
    ),
    ("code ids swapped", _swap_token_ids, "decision_config.json code 'A' (index 0) is tokens ["),
    ("code of two tokens", _rename_code, "decision_config.json code 'Question' (index 3) is tokens ["),
    ("zero max_length", _set(max_length=0), "invalid decision_config.json max_length 0 (must be a positive integer)"),
    (
        "bool validated_length",
        _set(validated_length=True),
        "invalid decision_config.json validated_length True (must be a positive integer)",
    ),
    (
        "validated above max",
        _set(validated_length=40000),
        "decision_config.json validated_length 40000 is above max_length 32768",
    ),
    (
        "bucket bounds not increasing",
        _set(temperature_by_questions={"max_questions": [4, 1], "temperature": [1.0, 1.0, 1.0]}),
        "invalid decision_config.json temperature_by_questions.max_questions [4, 1] (must increase)",
    ),
    (
        "one temperature too few",
        _set(temperature_by_questions={"max_questions": [1, 4, 16], "temperature": [1.046, 1.0, 1.0]}),
        "invalid decision_config.json temperature_by_questions: 3 bounds need 4 temperatures",
    ),
    (
        "bucket temperature not finite",
        _set(temperature_by_questions={"max_questions": [1], "temperature": [1.0, float("inf")]}),
        "invalid decision_config.json temperature_by_questions.temperature entry inf (must be positive and finite)",
    ),
    (
        "bucket with an extra key",
        _set(temperature_by_questions={"max_questions": [1], "temperature": [1.0, 1.0], "default": 1.0}),
        "invalid decision_config.json temperature_by_questions (expected {",
    ),
]


@pytest.mark.parametrize(("edit", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_decision_config_stops_start_up_with_one_line(folder: Path, edit: Edit, message: str) -> None:
    _edit(folder, edit)
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(folder)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_invalid_json_names_line_and_column() -> None:
    with pytest.raises(CheckpointError, match=r"^decision_config.json is not valid JSON: line 2 column 1"):
        parse_decision_config('{"codes": [\n}')


def test_a_tokenizer_that_adds_special_tokens_is_refused(folder: Path) -> None:
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = [
        {
            "id": 0,
            "content": "<s>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    ]
    tokenizer["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(CheckpointError, match="tokenizer.json adds special tokens around text"):
        read_checkpoint(folder)


def test_a_readout_of_the_wrong_shape_is_refused(folder: Path) -> None:
    save_file({"weight": torch.zeros(255, 32)}, str(folder / "readout.safetensors"))
    with pytest.raises(
        CheckpointError, match=r"readout.safetensors weight has shape \(255, 32\), expected \(255, 64\)"
    ):
        Engine.load(folder)


def test_a_missing_readout_is_refused(folder: Path) -> None:
    (folder / "readout.safetensors").unlink()
    with pytest.raises(CheckpointError, match="has a decision_config.json but no readout.safetensors"):
        read_checkpoint(folder)


def test_an_unsupported_backbone_is_refused(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "gpt2"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"unsupported backbone model_type 'gpt2' .* \(supported: llama, qwen3_5_text\)"
    ):
        Engine.load(folder)


def test_later_fields_are_read(folder: Path) -> None:
    config = read_checkpoint(folder).config
    assert config.attention_mode == "prefix_bidir"
    assert config.prompt_layout == "header-v1"
    assert config.validated_length == 16384
    assert config.temperature_by_questions == ((1, 4, 16), (1.046, 1.0, 1.0, 1.0))


def test_a_stock_model_without_decision_config_runs_zero_shot(folder: Path) -> None:
    (folder / "decision_config.json").unlink()
    (folder / "readout.safetensors").unlink()
    checkpoint = read_checkpoint(folder)
    assert checkpoint.zero_shot
    config = checkpoint.config
    assert (config.attention_mode, config.temperature, config.codes[:3]) == ("causal", 1.0, ("A", "B", "C"))
    engine = Engine.load(folder)
    head = engine.backbone.model.get_output_embeddings().weight
    assert torch.equal(engine.readout, head[list(config.token_ids)])
