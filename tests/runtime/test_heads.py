"""set, span, box and track on tiny checkpoints: what each card declares, the answer shapes of seed
002, and the same answers from the state once as from the dense reference path."""

from __future__ import annotations

from typing import Any

import pytest

from sr_runtime.engine import Engine
from tests.media.files import asset, image, video
from tests.runtime.exchange import refusal, respond

TOLERANCE = 1e-4
STATE = "Call Jane Doe at 555-0100 or write to jane@example.com about the refund."
TAGS = {
    "type": "set",
    "instructions": "Which topics does the message touch?",
    "criteria": {"billing": "Payments and refunds", "shipping": None, "contact": None},
}
PII = {
    "type": "span",
    "preset": "pii",
    "instructions": "Mark every piece of personal information in the text.",
    "criteria": {"person": "A person's name", "email": None, "phone": None},
}
MARK = {"type": "span", "instructions": "Mark the names.", "criteria": {"person": None}}
IMAGE = {"⟦img-1⟧": asset(image(1))}
VIDEO = {"⟦vid-1⟧": asset(video(2), "video", "mp4")}


CARDS = {
    "llama-causal": (["noul", "choice", "score", "set"], [], ["text"]),
    "hybrid-vision": (["noul", "choice", "score", "set"], [], ["text", "image", "video"]),
    "hybrid-heads": (["noul", "choice", "score", "set", "span"], ["pii"], ["text"]),
    "hybrid-vision-heads": (
        ["noul", "choice", "score", "set", "span", "box", "track"],
        ["pii"],
        ["text", "image", "video"],
    ),
}


@pytest.mark.parametrize("preset", list(CARDS))
def test_each_card_lists_exactly_what_its_checkpoint_answers(engines: dict[str, Engine], preset: str) -> None:
    card = engines[preset].card()
    assert (list(card.question_types), list(card.presets), list(card.modalities)) == CARDS[preset]
    every = {
        "set": TAGS,
        "span": MARK,
        "box": {"type": "box", "instructions": "the dog"},
        "track": {"type": "track", "instructions": "the dog"},
    }
    for kind, question in every.items():
        state = ["⟦img-1⟧", STATE] if kind == "box" else ["⟦vid-1⟧", STATE] if kind == "track" else STATE
        assets = IMAGE if kind == "box" else VIDEO if kind == "track" else None
        doc = {"state": state, "questions": {"q": question}, **({"assets": assets} if assets else {})}
        if kind in card.question_types:
            assert list(respond(engines[preset], doc)["answers"])[0] == "q"
        else:
            status, body = refusal(engines[preset], doc)
            assert (status, body["reason"]) == (422, "unsupported_question_type"), kind


def test_a_set_read_label_by_label_also_answers_each_label_as_a_noul(engines: dict[str, Engine]) -> None:
    engine = engines["llama-causal"]
    doc = {"state": STATE, "questions": {"tags": TAGS}}
    response = respond(engine, doc)
    labels = list(TAGS["criteria"])
    assert list(response["answers"]) == ["tags", *(f"tags.{label}" for label in labels)]
    assert response["answers"]["tags"] == {"type": "set"}
    probabilities = response["sets"]["tags"]["probabilities"]
    assert list(probabilities) == labels
    assert all(
        response["answers"][f"tags.{label}"] == {"type": "noul", "noul": probabilities[label]} for label in labels
    )
    assert response["sets"]["tags"]["selected"] == [label for label in labels if probabilities[label] >= 0.5]
    assert response["thresholds"] == {"tags": 0.5}
    # Each label is exactly the noul "instructions, true: <label>" asked on its own.
    alone = respond(
        engine,
        {
            "state": STATE,
            "questions": {
                "b": {
                    "type": "noul",
                    "instructions": TAGS["instructions"],
                    "criteria": {"true": "billing: Payments and refunds"},
                }
            },
        },
    )
    assert alone["answers"]["b"]["noul"] == pytest.approx(probabilities["billing"], abs=TOLERANCE)
    strict = respond(engine, {"state": STATE, "questions": {"tags": {**TAGS, "threshold": 0.99}}})
    assert strict["thresholds"] == {"tags": 0.99} and strict["sets"]["tags"]["selected"] == [
        label for label in labels if probabilities[label] >= 0.99
    ]


@pytest.mark.parametrize("preset", ["hybrid-heads", "hybrid-vision-heads"])
def test_set_and_span_heads_give_the_same_answers_from_the_state_once(
    engines: dict[str, Engine], references: dict[str, Engine], preset: str
) -> None:
    doc = {"state": STATE, "questions": {"tags": TAGS, "pii": PII, "names": MARK}}
    once, dense = respond(engines[preset], doc), respond(references[preset], doc)
    assert list(once["answers"]) == ["tags", "pii", "names"]  # a trained set readout: no per-label nouls
    for label, p in once["sets"]["tags"]["probabilities"].items():
        assert dense["sets"]["tags"]["probabilities"][label] == pytest.approx(p, abs=TOLERANCE)
    for q in ("pii", "names"):
        assert [(s["label"], s["start"], s["end"]) for s in once["spans"][q]] == [
            (s["label"], s["start"], s["end"]) for s in dense["spans"][q]
        ]
        for a, b in zip(once["spans"][q], dense["spans"][q]):
            assert a["probability"] == pytest.approx(b["probability"], abs=TOLERANCE)


def test_span_answers_mark_characters_of_the_state(engines: dict[str, Engine]) -> None:
    engine = engines["hybrid-heads"]
    response = respond(engine, {"state": STATE, "questions": {"pii": PII, "names": MARK}})
    spans = response["spans"]["pii"]
    assert spans, "the random head marks something at its own threshold"
    for span in spans:
        assert list(span) == ["label", "start", "end", "text", "probability"]
        assert span["label"] in PII["criteria"] and 0 <= span["start"] < span["end"] <= len(STATE)
        assert span["text"] == STATE[span["start"] : span["end"]] and span["text"] == span["text"].strip()
        assert span["probability"] >= 0.5
    assert response["thresholds"] == {"pii": 0.5, "names": 0.5}
    assert response["span_heads"] == {"pii": "pii", "names": "router"}  # the preset's trained head, else router
    strict = respond(engine, {"state": STATE, "questions": {"pii": {**PII, "threshold": 0.999}}})
    assert strict["thresholds"] == {"pii": 0.999} and len(strict["spans"]["pii"]) <= len(spans)
    assert all(s["probability"] >= 0.999 for s in strict["spans"]["pii"])


def test_a_span_over_a_state_with_media_counts_characters_of_the_text_alone(engines: dict[str, Engine]) -> None:
    engine = engines["hybrid-vision-heads"]
    response = respond(engine, {"state": ["⟦img-1⟧", STATE], "assets": IMAGE, "questions": {"names": MARK}})
    assert response["spans"]["names"] and all(
        s["text"] == STATE[s["start"] : s["end"]] for s in response["spans"]["names"]
    )


def test_head_picks_a_span_head_and_a_missing_one_is_invalid_question(engines: dict[str, Engine]) -> None:
    broad = respond(engines["hybrid-vision-heads"], {"state": STATE, "questions": {"names": {**MARK, "head": "broad"}}})
    assert broad["span_heads"] == {"names": "broad"}
    status, body = refusal(engines["hybrid-heads"], {"state": STATE, "questions": {"names": {**MARK, "head": "broad"}}})
    assert (status, body["code"], body["question"], body["reason"]) == (
        422,
        "question_failed",
        "names",
        "unsupported_field",
    )
    assert "no broad span head (span heads: router)" in body["detail"][0]["msg"]


def test_box_reads_the_requests_one_image(engines: dict[str, Engine], references: dict[str, Engine]) -> None:
    doc = {
        "state": ["⟦img-1⟧", "Where is the dog?"],
        "assets": IMAGE,
        "questions": {"dog": {"type": "box", "instructions": "the dog"}},
    }
    once = respond(engines["hybrid-vision-heads"], doc)["answers"]["dog"]
    assert list(once) == ["type", "box", "confidence"] and list(once["box"]) == ["top", "bottom", "left", "right"]
    edges = once["box"]
    assert (
        0 <= edges["top"] <= edges["bottom"] <= 1
        and 0 <= edges["left"] <= edges["right"] <= 1
        and 0 <= once["confidence"] <= 1
    )
    dense = respond(references["hybrid-vision-heads"], doc)["answers"]["dog"]
    assert all(dense["box"][e] == pytest.approx(v, abs=TOLERANCE) for e, v in edges.items())
    status, body = refusal(
        engines["hybrid-vision-heads"],
        {**doc, "state": "Where is the dog?", "assets": None} | {"assets": VIDEO, "state": ["⟦vid-1⟧", "x"]},
    )
    assert (status, body["reason"]) == (400, "box_needs_one_image")
    status, body = refusal(
        engines["hybrid-vision-heads"],
        {**doc, "questions": {"dog": {"type": "box", "instructions": "the dog", "at": 1.5}}},
    )
    assert (status, body["reason"]) == (422, "unsupported_field") and "does not take at" in body["detail"][0]["msg"]


def test_track_gives_one_box_per_sampled_moment_of_the_video(engines: dict[str, Engine]) -> None:
    doc = {
        "state": ["⟦vid-1⟧", "Follow the dog."],
        "assets": VIDEO,
        "questions": {"run": {"type": "track", "instructions": "the dog"}},
    }
    run = respond(engines["hybrid-vision-heads"], doc)["answers"]["run"]
    times = [step["at"] for step in run["track"]]
    assert len(times) == 4 and times == sorted(times) and times[0] == 0.0  # 8 frames of a 2 s video, in pairs
    assert all(0 <= s["box"]["top"] <= s["box"]["bottom"] <= 1 for s in run["track"])
    status, body = refusal(engines["hybrid-vision-heads"], {**doc, "questions": {"run": {"type": "track", "rate": 2}}})
    assert (status, body["reason"]) == (422, "unsupported_field") and "does not take rate" in body["detail"][0]["msg"]


def test_a_40_runtime_answers_in_40_shapes(engines: dict[str, Engine]) -> None:
    engine = engines["hybrid-heads"]
    doc = {
        "states": [STATE, "Thanks, all good."],
        "questions": {
            "tags": {"type": "set", "labels": ["billing", "shipping"]},
            "pii": {"type": "span", "preset": "pii"},
        },
    }
    response = respond(engine, doc, "vllm-sr/4.0")
    assert list(response) == ["model", "answers", "usage", "spans", "sets", "thresholds"]  # no span_heads before 5.0
    assert len(response["spans"]) == len(response["sets"]) == 2  # one entry per state
    assert list(response["sets"][0]["tags"]["probabilities"]) == ["billing", "shipping"]
    assert {s["label"] for s in response["spans"][0]["pii"]} <= {"person", "email", "phone", "address", "id_number"}


def test_decisions_keeps_a_failing_questions_own_error_beside_the_answers(engines: dict[str, Engine]) -> None:
    doc = {"state": STATE, "questions": {"tags": TAGS, "names": {**MARK, "head": "broad"}}}
    response = respond(engines["hybrid-heads"], doc, path="/v1/decisions")
    assert set(response["sets"]) == {"tags"} and "spans" not in response
    assert (response["answers"]["names"]["error"], response["answers"]["names"]["reason"]) == (
        "invalid_question",
        "unsupported_field",
    )


def test_checkpoint_check_names_the_media_and_heads_and_a_missing_head_tensor_stops_start_up(
    checkpoints: dict[str, Any], tmp_path: Any
) -> None:
    import shutil

    from safetensors.torch import load_file, save_file
    from typer.testing import CliRunner

    from sr_runtime.cli import app
    from sr_runtime.errors import CheckpointError

    shown = CliRunner().invoke(app, ["checkpoint", "check", str(checkpoints["hybrid-vision-heads"])])
    assert shown.exit_code == 0 and shown.output.rstrip().endswith(
        "media: image and video (vision/), heads: set, box, track, span router, span broad, preset pii"
    )
    broken = tmp_path / "broken"
    shutil.copytree(checkpoints["hybrid-heads"], broken)
    weights = load_file(str(broken / "heads.safetensors"))
    del weights["span.router.bias"]
    save_file(weights, str(broken / "heads.safetensors"))
    with pytest.raises(CheckpointError, match=r"heads.safetensors span.router.bias has shape None, expected \(1,\)"):
        Engine.load(broken)
    blind = tmp_path / "blind"
    shutil.copytree(checkpoints["hybrid-vision"], blind)
    shutil.rmtree(blind / "vision")
    with pytest.raises(
        CheckpointError, match="a vision tower needs both the vision/ folder and decision_config.json media"
    ):
        Engine.load(blind)
