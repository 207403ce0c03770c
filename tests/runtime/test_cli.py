"""`vllm-srun`: every command run the way a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sr_runtime.cli import app

from .conftest import SEED_002_STATE

runner = CliRunner()
VLLM_SRUN = str(Path(sys.executable).with_name("vllm-srun"))
REQUEST = {
    "state": SEED_002_STATE,
    "questions": {
        "urgent": {"type": "noul", "instructions": "Does the user report a problem that blocks their work?"},
        "team": {"type": "choice", "criteria": {"billing": "Payments", "engineering": "Bugs", "other": None}},
        "anger": {"type": "score", "criteria": ["calm", "annoyed", "furious"]},
    },
}


@pytest.fixture
def request_file(tmp_path: Path) -> Path:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(REQUEST))
    return path


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "answer" in result.output and "checkpoint" in result.output and "serve" in result.output
    answer_help = runner.invoke(app, ["answer", "--help"]).output
    for flag in ("--device", "--reference", "--no-state-cache", "--max-model-len", "--systemone-schema"):
        assert flag in answer_help


@pytest.mark.parametrize("preset", ["hybrid-prefix-bidir", "llama-causal"])
def test_answer_prints_the_standard_response_and_reference_agrees(
    checkpoints: dict[str, Path], request_file: Path, preset: str
) -> None:
    result = runner.invoke(app, ["answer", str(checkpoints[preset]), str(request_file), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    response = json.loads(result.output)
    assert response["model"] == preset
    assert list(response["answers"]) == ["urgent", "team", "anger"]
    assert set(response["answers"]["team"]["probabilities"]) == {"billing", "engineering", "other"}
    assert response["usage"]["output_tokens"] == 0 and response["usage"]["input_tokens"] > 0
    reference = runner.invoke(
        app, ["answer", str(checkpoints[preset]), str(request_file), "--reference", "--no-state-cache"]
    )
    assert reference.exit_code == 0
    other = json.loads(reference.output)
    assert other["answers"]["urgent"]["noul"] == pytest.approx(response["answers"]["urgent"]["noul"], abs=1e-4)
    assert other["answers"]["anger"]["score"] == pytest.approx(response["answers"]["anger"]["score"], abs=1e-3)


def test_an_unanswerable_question_exits_1_with_the_error_body(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    body = {
        "state": SEED_002_STATE,
        "questions": {"ok": REQUEST["questions"]["urgent"], "dog": {"type": "box", "instructions": "the dog"}},
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps(body))
    result = runner.invoke(app, ["answer", str(checkpoints["llama-causal"]), str(path)])
    assert result.exit_code == 1
    error = json.loads(result.stdout)
    assert (error["code"], error["question"], error["reason"]) == (
        "question_failed",
        "dog",
        "unsupported_question_type",
    )
    assert error["detail"][0]["type"] == "invalid_question"
    assert (
        '422 question_failed: question "dog" cannot be answered: this model answers noul, choice, score, set '
        "questions, not box"
    ) in result.stderr


def test_an_invalid_request_exits_1_and_an_unreadable_one_exits_2(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"state": "s", "questions": {}}))
    result = runner.invoke(app, ["answer", str(checkpoints["llama-causal"]), str(bad)])
    assert result.exit_code == 1 and "422 invalid_request: questions: " in result.stderr
    assert json.loads(result.stdout)["detail"][0]["loc"] == ["body", "questions"]
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{nope")
    result = runner.invoke(app, ["answer", str(checkpoints["llama-causal"]), str(garbled)])
    assert result.exit_code == 2 and "not JSON" in result.stderr
    result = runner.invoke(app, ["answer", str(checkpoints["llama-causal"]), str(tmp_path / "missing.json")])
    assert result.exit_code == 2 and "cannot read" in result.stderr


def test_an_unusable_checkpoint_exits_2_with_one_line_and_no_traceback(
    checkpoints: dict[str, Path], request_file: Path, tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(checkpoints["llama-causal"], tmp_path / "ckpt"))
    config = json.loads((folder / "decision_config.json").read_text())
    config["attention_mode"] = "x"
    (folder / "decision_config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [VLLM_SRUN, "answer", str(folder), str(request_file)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "unsupported decision_config.json attention_mode 'x' (supported: causal, noncausal_full_attention, "
        "prefix_bidir)"
    ]
    assert done.stdout == ""


def test_checkpoint_create_is_deterministic_under_a_seed(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder, seed in ((a, "7"), (b, "7"), (c, "8")):
        result = runner.invoke(
            app, ["checkpoint", "create", str(folder), "--preset", "llama-prefix-bidir", "--seed", seed]
        )
        assert result.exit_code == 0, result.output
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert all((a / n).read_bytes() == (b / n).read_bytes() for n in names)
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()
    checked = runner.invoke(app, ["checkpoint", "check", str(a)])
    assert checked.exit_code == 0
    assert "255 codes, prefix_bidir, layout header-v1, max_length 32768, validated_length 16384" in checked.output


def test_checkpoint_create_refuses_an_unknown_preset(tmp_path: Path) -> None:
    result = runner.invoke(app, ["checkpoint", "create", str(tmp_path / "x"), "--preset", "huge"])
    assert result.exit_code == 1
    assert "unknown preset 'huge' (presets: hybrid-prefix-bidir," in result.stderr
