"""The question extensions of seed 002 on tiny checkpoints, through `vllm-srun answer`'s path:
require_full_input and input_coverage, return_meta, abstain_probability, the scan budget,
overflow, and the fields no model here honours (refused naming the field)."""

from __future__ import annotations

from typing import Any

import pytest

from sr_runtime.engine import Engine
from tests.media.files import asset, image, video
from tests.runtime.exchange import refusal, respond

from .conftest import SEED_002_STATE

NOUL = {"type": "noul", "instructions": "Does the user report a problem that blocks their work?"}
TEAM = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "engineering": None}}
SCORE = {"type": "score", "criteria": ["calm", "annoyed", "furious"]}


def test_require_full_input_holds_for_text_and_images_and_fails_for_a_sampled_video(engines: dict[str, Engine]) -> None:
    engine = engines["hybrid-vision"]
    full = {**NOUL, "require_full_input": True}
    text = respond(engine, {"state": SEED_002_STATE, "questions": {"q": full, "plain": NOUL}})
    assert text["answers"]["q"]["input_coverage"] == "complete" and "input_coverage" not in text["answers"]["plain"]
    photo = respond(
        engine, {"state": ["⟦img-1⟧", "x"], "assets": {"⟦img-1⟧": asset(image(1))}, "questions": {"q": full}}
    )
    assert photo["answers"]["q"]["input_coverage"] == "complete"
    # 12 frames, read as the card's sample of 8: not every input token was read.
    doc = {
        "state": ["⟦vid-1⟧", "x"],
        "assets": {"⟦vid-1⟧": asset(video(2, frames=12), "video", "mp4")},
        "questions": {"plain": NOUL, "q": full},
    }
    status, body = refusal(engine, doc)
    assert (status, body["code"], body["question"], body["reason"]) == (400, "question_failed", "q", "partial_input")
    assert "plain" in respond(engine, {**doc, "questions": {"plain": NOUL}})["answers"]
    short = {**doc, "assets": {"⟦vid-1⟧": asset(video(2, frames=8), "video", "mp4")}}
    assert respond(engine, short)["answers"]["q"]["input_coverage"] == "complete"


def test_return_meta_says_what_was_read_whether_the_state_was_cached_and_how_long_it_took(fresh_engine: Any) -> None:
    engine: Engine = fresh_engine("llama-causal")
    doc = {"state": SEED_002_STATE, "questions": {"q": NOUL, "team": TEAM}, "options": {"return_meta": True}}
    first, second = respond(engine, doc), respond(engine, doc)
    assert list(first["meta"]) == ["tokens_read", "state_cache_hit", "queue_ms", "inference_ms", "batched_requests"]
    assert first["meta"]["tokens_read"] == first["usage"]["input_tokens"]
    assert (first["meta"]["state_cache_hit"], second["meta"]["state_cache_hit"]) == (False, True)
    assert first["meta"]["inference_ms"] > 0 and first["meta"]["batched_requests"] == 1
    assert "meta" not in respond(engine, {**doc, "options": {}})


def test_abstain_probability_where_the_checkpoint_has_an_abstain_code(engines: dict[str, Engine]) -> None:
    doc = {"state": SEED_002_STATE, "questions": {"q": NOUL, "team": TEAM, "anger": SCORE}}
    with_code = respond(engines["hybrid-heads"], doc)["answers"]
    for q in ("q", "team", "anger"):
        assert 0 < with_code[q]["abstain_probability"] < 1
    assert sum(with_code["team"]["probabilities"].values()) == pytest.approx(1.0)  # the options, if it must answer
    assert all("abstain_probability" not in a for a in respond(engines["llama-causal"], doc)["answers"].values())
    # The abstain code is the last of 255, so 254 options remain.
    assert engines["hybrid-heads"].card().limits.max_options == 254
    status, body = refusal(
        engines["hybrid-heads"],
        {"state": "s", "questions": {"wide": {"type": "choice", "criteria": {f"o{i}": None for i in range(255)}}}},
    )
    assert (status, body["reason"]) == (422, "question_malformed") and "2 to 254 options" in body["detail"][0]["msg"]


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("over", ["request"], "does not take over"),
        ("decision_adapter", "legal-v2", "does not take decision_adapter"),
    ],
)
def test_fields_no_model_here_honours_are_invalid_question_naming_them(
    engines: dict[str, Engine], field: str, value: Any, says: str
) -> None:
    status, body = refusal(
        engines["hybrid-heads"], {"state": {"request": SEED_002_STATE}, "questions": {"q": {**NOUL, field: value}}}
    )
    assert (status, body["code"], body["question"], body["reason"]) == (
        422,
        "question_failed",
        "q",
        "unsupported_field",
    )
    assert says in body["detail"][0]["msg"]


def test_overflow_window_and_the_scan_budget(engines: dict[str, Engine]) -> None:
    engine = engines["llama-causal"]
    windowed = respond(engine, {"state": SEED_002_STATE, "questions": {"q": {**NOUL, "overflow": "window"}}})
    tokens = windowed["usage"]["input_tokens"]
    assert (
        respond(engine, {"state": SEED_002_STATE, "questions": {"q": NOUL}, "options": {"max_tokens": tokens}})[
            "answers"
        ]["q"]["type"]
        == "noul"
    )
    status, body = refusal(
        engine, {"state": SEED_002_STATE, "questions": {"q": NOUL}, "options": {"max_tokens": tokens - 1}}
    )
    assert (status, body["reason"]) == (400, "scan_budget_exceeded") and f"read {tokens} tokens" in body["detail"][
        "message"
    ]


def test_overflow_truncate_reads_the_states_first_tokens_where_the_prompt_is_too_long(
    fresh_engine: Any, checkpoints: dict[str, Any]
) -> None:
    long_state = " ".join([SEED_002_STATE] * 12)
    engine: Engine = fresh_engine("hybrid-prefix-bidir", max_model_len=128)
    reference = Engine.load(checkpoints["hybrid-prefix-bidir"], max_model_len=128, reference=True)
    status, body = refusal(engine, {"state": long_state, "questions": {"q": NOUL}})
    assert (status, body["reason"]) == (400, "max_length_exceeded")
    doc = {
        "state": long_state,
        "questions": {"q": {**NOUL, "overflow": "truncate"}, "t": {**TEAM, "overflow": "truncate"}},
    }
    once, dense = respond(engine, doc), respond(reference, doc)
    assert once["answers"]["q"]["input_coverage"] == once["answers"]["t"]["input_coverage"] == "partial"
    assert once["answers"]["q"]["noul"] == pytest.approx(dense["answers"]["q"]["noul"], abs=1e-4)
    assert engine.state_cache.stats.misses == 1  # the truncated state, once for both questions
    short = respond(
        engine,
        {"state": SEED_002_STATE, "questions": {"q": {**NOUL, "overflow": "truncate", "require_full_input": True}}},
    )
    assert short["answers"]["q"]["input_coverage"] == "complete"  # nothing to cut
    status, body = refusal(
        engine, {"state": long_state, "questions": {"q": {**NOUL, "overflow": "truncate", "require_full_input": True}}}
    )
    assert (status, body["reason"]) == (400, "partial_input") and "overflow: truncate" in body["detail"]["message"]
