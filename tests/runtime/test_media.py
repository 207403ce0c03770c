"""Images and videos on a checkpoint with a vision tower: read in place, once per state, within limits.

Requests are System One bodies, answered the way `vllm-srun answer` answers them; the reference
engine runs each question as one whole forward with a dense mask and no cache (seed 001's
checkpoint runtime), and every probability must agree within 1e-4.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from sr_runtime.engine import Engine
from tests.conftest import same_to
from tests.media.files import asset, image, video
from tests.runtime.exchange import refusal, respond

from .conftest import SEED_002_STATE

TOLERANCE = 1e-4
PRESET = "hybrid-vision"
QUESTIONS = {
    "dog": {"type": "noul", "instructions": "Is there a dog?"},
    "scene": {
        "type": "choice",
        "instructions": "Where is this?",
        "criteria": {"indoors": None, "outdoors": "Streets, parks, fields", "unclear": None},
    },
    "motion": {"type": "score", "instructions": "How much moves?", "criteria": ["nothing", "a little", "a lot"]},
    "bright": {"type": "noul", "criteria": {"true": "The picture is bright", "false": "The picture is dark"}},
}
IMG, IMG_2, VID = image(1), image(2, 80, 50, "JPEG"), video(3)
CASES: dict[str, dict[str, Any]] = {
    "text": {"state": SEED_002_STATE},
    "one image": {"state": ["⟦img-1⟧", "What is shown?"], "assets": {"⟦img-1⟧": asset(IMG)}},
    "several images": {
        "state": "Compare ⟦img-1⟧ with ⟦img-2⟧: which is brighter?",
        "assets": {"⟦img-1⟧": asset(IMG), "⟦img-2⟧": asset(IMG_2, fmt="jpeg")},
    },
    "a video": {"state": ["⟦vid-1⟧", "What happens here?"], "assets": {"⟦vid-1⟧": asset(VID, "video", "mp4")}},
    "a video with an image": {
        "state": ["⟦img-1⟧", "⟦vid-1⟧", "Does the photo appear in the video?"],
        "assets": {"⟦img-1⟧": asset(IMG), "⟦vid-1⟧": asset(VID, "video", "mp4")},
    },
}


def probabilities(response: dict[str, Any]) -> list[float]:
    out = []
    for a in response["answers"].values():
        if a["type"] in ("noul", "choice", "score"):  # a set's probabilities are in sets
            out += [a["noul"]] if a["type"] == "noul" else list(a["probabilities"].values())
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_state_once_equals_the_reference_path_with_media(
    engines: dict[str, Engine], references: dict[str, Engine], case: str
) -> None:
    doc = {**CASES[case], "questions": QUESTIONS}
    once, dense = respond(engines[PRESET], doc), respond(references[PRESET], doc)
    assert list(once["answers"]) == list(QUESTIONS)
    assert max(abs(a - b) for a, b in zip(probabilities(once), probabilities(dense))) <= TOLERANCE
    assert once["usage"] == dense["usage"]


def test_the_state_with_its_media_is_computed_once_for_all_questions(fresh_engine: Any) -> None:
    engine: Engine = fresh_engine(PRESET)
    doc = {**CASES["a video with an image"], "questions": QUESTIONS}
    first = respond(engine, doc)
    assert (engine.state_cache.stats.misses, len(engine.state_cache)) == (1, 1)  # one state for four questions
    again = respond(engine, doc)
    assert engine.state_cache.stats.hits == 1
    # The first call read the state in the pass that computed it (sr_runtime/one_pass.py), the
    # second from the cache: the same answers, to float rounding.
    assert [a.get("choice") for a in again["answers"].values()] == [a.get("choice") for a in first["answers"].values()]
    assert max(abs(a - b) for a, b in zip(probabilities(again), probabilities(first))) <= 1e-5
    # Same text, another image: the placeholder's token ids are equal, the asset's digest is not.
    other = {**doc, "assets": {**doc["assets"], "⟦img-1⟧": asset(image(9))}}
    respond(engine, other)
    assert engine.state_cache.stats.misses == 2


def test_the_media_are_read_where_their_placeholders_stand(engines: dict[str, Engine]) -> None:
    engine = engines[PRESET]
    base = {"questions": QUESTIONS, "assets": {"⟦img-1⟧": asset(IMG)}}
    one = respond(engine, {**base, "state": "⟦img-1⟧ A photo from my trip."})
    other_image = respond(
        engine, {**base, "assets": {"⟦img-1⟧": asset(image(5))}, "state": "⟦img-1⟧ A photo from my trip."}
    )
    moved = respond(engine, {**base, "state": "A photo from my trip. ⟦img-1⟧"})
    for changed in (other_image, moved):
        assert max(abs(a - b) for a, b in zip(probabilities(one), probabilities(changed))) > 100 * TOLERANCE
    # Seed 002's media rule: [image, element] is the element with the image before it, which is
    # the state block "system, image, State: element" and not the text "⟦img-1⟧" in an array.
    rule = respond(engine, {**base, "state": ["⟦img-1⟧", "A photo from my trip."]})
    tokens = engine.checkpoint.tokenizer.encode("A photo from my trip.").ids
    assert rule["usage"]["input_tokens"] < one["usage"]["input_tokens"] + len(tokens)


def test_a_4_0_runtime_reads_inline_images_before_the_state(engines: dict[str, Engine]) -> None:
    engine = engines[PRESET]
    legacy = {
        "state": "What is shown?",
        "images": [{"format": "png", "data_base64": asset(IMG)["data_base64"]}],
        "questions": QUESTIONS,
    }
    new = {"state": ["⟦img-1⟧", "What is shown?"], "assets": {"⟦img-1⟧": asset(IMG)}, "questions": QUESTIONS}
    # To float rounding: the second reads the state the first computed, from the engine's cache.
    assert same_to(respond(engine, legacy, "vllm-sr/4.0")["answers"], respond(engine, new)["answers"], 1e-6)


def _limited(engine: Engine, **limits: int) -> Engine:
    """The same weights behind a card with other media limits."""
    assert engine.vision is not None
    vision = dataclasses.replace(engine.vision.media, **limits)
    tower = type(engine.vision)(engine.vision.model, vision, engine.vision.device)
    return Engine(engine.name, engine.checkpoint, engine.backbone, engine.readout, vision=tower)


@pytest.mark.parametrize(
    ("limits", "assets", "reason", "says"),
    [
        ({"max_asset_bytes": 1000}, {"⟦img-1⟧": asset(IMG)}, "asset_too_large", "over the model's 1000"),
        (
            {},
            {"⟦img-1⟧": asset(image(4, width=1100, height=20))},
            "resolution_too_large",
            "1100x20 pixels, over the model's 1024",
        ),
        (
            {"max_video_frames": 10},
            {"⟦img-1⟧": asset(VID, "video", "mp4")},
            "too_many_frames",
            "more than the model's 10 frames",
        ),
        ({}, {"⟦img-1⟧": asset(b"GIF89a not really")}, "invalid_asset", "not a readable image"),
        ({}, {"⟦img-1⟧": asset(b"\0" * 64, "video", "mp4")}, "invalid_asset", "not a readable video"),
        (
            {},
            {"⟦img-1⟧": {"type": "image", "format": "png", "data_base64": "@@ not base64"}},
            "invalid_asset",
            "not base64",
        ),
    ],
)
def test_an_asset_over_a_card_limit_or_unreadable_is_400_invalid_input(
    engines: dict[str, Engine], limits: dict[str, int], assets: dict[str, Any], reason: str, says: str
) -> None:
    engine = _limited(engines[PRESET], **limits) if limits else engines[PRESET]
    status, body = refusal(engine, {"state": ["⟦img-1⟧", "What is shown?"], "assets": assets, "questions": QUESTIONS})
    assert status == 400
    assert (body["code"], body["question"], body["reason"]) == ("question_failed", "dog", reason)
    assert says in body["detail"]["message"] and body["detail"]["error_type"] == "api_usage_error"


def test_a_text_model_refuses_media_and_no_model_reads_media_inside_a_question(engines: dict[str, Engine]) -> None:
    doc = {"state": ["⟦img-1⟧", "What is shown?"], "assets": {"⟦img-1⟧": asset(IMG)}, "questions": QUESTIONS}
    status, body = refusal(engines["llama-causal"], doc)
    assert (status, body["reason"]) == (400, "unsupported_media")
    inside = {
        **doc,
        "state": "What is shown?",
        "questions": {"q": {"type": "noul", "instructions": "Is ⟦img-1⟧ a dog?"}},
    }
    status, body = refusal(engines[PRESET], inside)
    assert (status, body["code"], body["reason"]) == (422, "question_failed", "media_in_question")
    assert body["detail"][0]["loc"] == ["body", "questions", "q"] and body["detail"][0]["type"] == "invalid_question"


def test_the_card_says_what_the_tower_reads(engines: dict[str, Engine]) -> None:
    card = engines[PRESET].card()
    assert card.modalities == ("text", "image", "video")
    assert card.limits.media is not None and card.limits.media.max_video_frames == 300
    assert (
        engines["llama-causal"].card().modalities == ("text",) and engines["llama-causal"].card().limits.media is None
    )


def test_vllm_srun_answer_reads_a_request_with_an_image_and_a_video(checkpoints: dict[str, Any], tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from sr_runtime.cli import app

    path = tmp_path / "request.json"
    path.write_text(json.dumps({**CASES["a video with an image"], "questions": QUESTIONS}))
    result = CliRunner().invoke(app, ["answer", str(checkpoints[PRESET]), str(path)])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert (
        list(shown["answers"]) == list(QUESTIONS)
        and shown["answers"]["scene"]["choice"] in QUESTIONS["scene"]["criteria"]
    )
    path.write_text(
        json.dumps({"state": ["⟦img-1⟧", "x"], "assets": {"⟦img-1⟧": asset(b"nope")}, "questions": QUESTIONS})
    )
    refused = CliRunner().invoke(app, ["answer", str(checkpoints[PRESET]), str(path)])
    assert refused.exit_code == 1 and '"reason": "invalid_asset"' in refused.output


def test_a_4_0_runtime_keeps_the_array_reading_of_media_before_an_element(engines: dict[str, Engine]) -> None:
    """Seed 000: on 4.0 the array stays an array whose placeholder labels its asset (the image
    stands inside the array's JSON text); 5.0 reads the element with the image before it."""
    engine = engines[PRESET]
    doc = {"state": ["⟦img-1⟧", "What is shown?"], "assets": {"⟦img-1⟧": asset(IMG)}, "questions": QUESTIONS}
    legacy, current = respond(engine, doc, "vllm-sr/4.0"), respond(engine, doc)
    assert legacy["usage"]["input_tokens"] > current["usage"]["input_tokens"]  # the array's brackets and quotes
    assert max(abs(a - b) for a, b in zip(probabilities(legacy), probabilities(current))) > 100 * TOLERANCE


def test_a_card_that_allows_it_reads_media_in_instructions_and_criteria(
    engines: dict[str, Engine], references: dict[str, Engine]
) -> None:
    engine, reference = engines["hybrid-vision-heads"], references["hybrid-vision-heads"]
    assert engine.card().media_in_questions and not engines[PRESET].card().media_in_questions
    doc = {
        "state": ["⟦vid-1⟧", "The clip from the garden."],
        "assets": {"⟦img-1⟧": asset(IMG), "⟦img-2⟧": asset(IMG_2, fmt="jpeg"), "⟦vid-1⟧": asset(VID, "video", "mp4")},
        "questions": {
            "which": {
                "type": "choice",
                "instructions": "Which photo was taken from the video?",
                "criteria": {"first": "⟦img-1⟧", "second": "⟦img-2⟧"},
            },
            "same": {"type": "noul", "instructions": "Does ⟦img-1⟧ show the same garden?"},
            "tags": {"type": "set", "criteria": {"pets": None, "garden": "like ⟦img-2⟧"}},
        },
    }
    once, dense = respond(engine, doc), respond(reference, doc)
    assert max(abs(a - b) for a, b in zip(probabilities(once), probabilities(dense))) <= TOLERANCE
    for a, b in zip(once["sets"]["tags"]["probabilities"].values(), dense["sets"]["tags"]["probabilities"].values()):
        assert a == pytest.approx(b, abs=TOLERANCE)
    swapped = respond(
        engine, {**doc, "assets": {**doc["assets"], "⟦img-1⟧": asset(IMG_2, fmt="jpeg"), "⟦img-2⟧": asset(IMG)}}
    )
    assert (
        abs(swapped["answers"]["which"]["probabilities"]["first"] - once["answers"]["which"]["probabilities"]["first"])
        > 100 * TOLERANCE
    )
