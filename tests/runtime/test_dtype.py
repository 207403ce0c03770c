"""`--dtype`: bfloat16 and float16 engines against the float32 reference path on every preset
(seed 001's bar: no decision changed, max |dp| <= 0.03), and the dtype on the card, /health and
the command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from sr_runtime.cli import app
from sr_runtime.engine import Engine
from sr_runtime.errors import CheckpointError
from sr_runtime.kernels import resolve_dtype
from sr_runtime.presets import PRESETS
from sr_runtime.server import ServerSettings, SettingsError
from sr_runtime.types import Answer, ChoiceAnswer, NoulAnswer, QuestionError, Result
from tests.runtime import test_media
from tests.runtime.test_engine import CASES
from tests.runtime.test_heads import MARK, PII, TAGS
from tests.runtime.test_heads import STATE as PII_STATE
from tests.runtime_server.conftest import serving

from .exchange import respond

BAR = 0.03  # seed 001: 1 near-tie changed of 260 decisions, max |dp| 0.026
HALF = ("bfloat16", "float16")
runner = CliRunner()


@pytest.fixture(scope="module")
def half(checkpoints: dict[str, Path]) -> Callable[[str, str], Engine]:
    """Half-precision engines, each loaded once for the module."""
    made: dict[tuple[str, str], Engine] = {}

    def engine(preset: str, dtype: str) -> Engine:
        if (preset, dtype) not in made:
            made[preset, dtype] = Engine.load(checkpoints[preset], dtype=dtype)
        return made[preset, dtype]

    return engine


def readings(result: Result) -> list[tuple[int, list[float]]]:
    """Each answer's decision (the top option; a noul's yes at 0.5) and its probabilities."""

    def one(answer: Answer | QuestionError) -> tuple[int, list[float]]:
        assert not isinstance(answer, QuestionError), answer
        if isinstance(answer, NoulAnswer):
            return int(answer.noul >= 0.5), [1 - answer.noul, answer.noul]
        probs = (
            [p for _, p in answer.probabilities] if isinstance(answer, ChoiceAnswer) else list(answer.probabilities)  # type: ignore[attr-defined]
        )
        return max(range(len(probs)), key=probs.__getitem__), probs

    return [one(a) for a in result.answers]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_half_precision_keeps_every_decision_of_the_float32_reference(
    half: Callable[[str, str], Engine], references: dict[str, Engine], preset: str, dtype: str
) -> None:
    engine = half(preset, dtype)
    assert engine.dtype == getattr(torch, dtype) and engine.card().dtype == dtype
    worst = 0.0
    for case, request in CASES.items():
        got, want = readings(engine.answer(request)), readings(references[preset].answer(request))
        assert [d for d, _ in got] == [d for d, _ in want], case
        worst = max(worst, *(abs(a - b) for (_, p), (_, q) in zip(got, want) for a, b in zip(p, q)))
    assert worst <= BAR


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", ["one image", "a video with an image"])
def test_half_precision_reads_images_and_video_as_the_float32_reference(
    half: Callable[[str, str], Engine], references: dict[str, Engine], case: str, dtype: str
) -> None:
    doc = {**test_media.CASES[case], "questions": test_media.QUESTIONS}
    got = respond(half(test_media.PRESET, dtype), doc)
    want = respond(references[test_media.PRESET], doc)
    for q in test_media.QUESTIONS:
        a, b = got["answers"][q], want["answers"][q]
        if a["type"] == "noul":
            assert (a["noul"] >= 0.5) == (b["noul"] >= 0.5) and abs(a["noul"] - b["noul"]) <= BAR
        else:
            pa, pb = a["probabilities"], b["probabilities"]
            assert max(pa, key=pa.get) == max(pb, key=pb.get)
            assert max(abs(pa[k] - pb[k]) for k in pa) <= BAR


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("preset", ["hybrid-heads", "hybrid-vision-heads"])
def test_half_precision_heads_select_what_the_float32_reference_selects(
    half: Callable[[str, str], Engine], references: dict[str, Engine], preset: str, dtype: str
) -> None:
    doc = {"state": PII_STATE, "questions": {"tags": TAGS, "pii": PII, "names": MARK}}
    got, want = respond(half(preset, dtype), doc), respond(references[preset], doc)
    assert got["sets"]["tags"]["selected"] == want["sets"]["tags"]["selected"]
    probs = want["sets"]["tags"]["probabilities"]
    assert max(abs(p - probs[label]) for label, p in got["sets"]["tags"]["probabilities"].items()) <= BAR
    # A span is one threshold decision per state token and label, and these random heads put
    # many of them near the threshold: each label may mark a few characters (5%) differently.
    for q in ("pii", "names"):
        marked, wanted = _marked(got["spans"][q]), _marked(want["spans"][q])
        assert set(marked) == set(wanted)
        assert all(len(marked[label] ^ wanted[label]) <= 0.05 * len(PII_STATE) for label in wanted)


def _marked(spans: list[dict[str, Any]]) -> dict[str, set[int]]:
    """The characters of the state each label marks."""
    out: dict[str, set[int]] = {}
    for span in spans:
        out.setdefault(span["label"], set()).update(range(span["start"], span["end"]))
    return out


def test_auto_is_float32_on_cpu_and_bfloat16_on_cuda_for_a_float32_checkpoint() -> None:
    assert resolve_dtype("auto", "float32", "cpu") == torch.float32
    assert resolve_dtype("auto", "bfloat16", "cpu") == torch.float32  # bf16 matmuls are slow on CPU
    assert resolve_dtype("auto", "float32", "cuda") == torch.bfloat16
    assert resolve_dtype("auto", None, "cuda:1") == torch.bfloat16
    assert resolve_dtype("auto", "float16", "cuda") == torch.float16
    assert resolve_dtype("float32", "bfloat16", "cuda") == torch.float32
    with pytest.raises(ValueError, match="--dtype must be one of auto, bfloat16, float16, float32, not 'int8'"):
        resolve_dtype("int8", "float32", "cpu")


def test_an_engine_on_cpu_runs_in_float32_unless_told_and_refuses_an_unknown_dtype(
    engines: dict[str, Engine], checkpoints: dict[str, Path]
) -> None:
    assert engines["llama-causal"].dtype == torch.float32
    assert engines["llama-causal"].card().dtype == "float32"
    with pytest.raises(CheckpointError, match="--dtype must be one of"):
        Engine.load(checkpoints["llama-causal"], dtype="fp8")


def test_vllm_srun_answer_takes_dtype_and_refuses_an_unknown_one(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"state": "The app crashes on login.", "questions": {"q": {"type": "noul"}}}))
    for command in ("answer", "serve"):
        assert "--dtype" in runner.invoke(app, [command, "--help"]).output
    result = runner.invoke(
        app, ["answer", str(checkpoints["hybrid-prefix-bidir"]), str(request), "--dtype", "bfloat16"]
    )
    assert result.exit_code == 0, result.output
    assert 0 <= json.loads(result.output)["answers"]["q"]["noul"] <= 1
    wrong = runner.invoke(app, ["answer", str(checkpoints["hybrid-prefix-bidir"]), str(request), "--dtype", "int8"])
    assert wrong.exit_code == 2 and "--dtype must be one of auto, bfloat16, float16, float32" in wrong.output


def test_health_and_the_model_card_say_the_dtype(checkpoints: dict[str, Path]) -> None:
    with serving(ServerSettings(str(checkpoints["llama-prefix-bidir"]), dtype="bfloat16")) as client:
        health: dict[str, Any] = client.get("/health").json()
        assert health["ready"] and health["dtype"] == "bfloat16"
        card = client.get("/v1/models").json()["models"][0]["card"]
        assert card["dtype"] == "bfloat16"
    with pytest.raises(SettingsError, match="--dtype must be one of"):
        ServerSettings("default", dtype="half")
