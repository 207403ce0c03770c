"""`vllm-srun serve` on a checkpoint with a vision tower: assets inline or as multipart parts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from sr_runtime.presets import create
from sr_runtime.server import ServerSettings
from tests.conftest import same_to
from tests.media.files import asset, image, video

from .conftest import CHOICE, NOUL, SCORE, serving

QUESTIONS = {"urgent": NOUL, "team": CHOICE, "anger": SCORE}
IMG, VID = image(1), video(2)


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    folder = create(tmp_path_factory.mktemp("ckpt") / "tiny-vision", "hybrid-vision", seed=0)
    with serving(ServerSettings(str(folder))) as client:
        yield client


def _multipart(request: dict[str, Any], parts: dict[str, tuple[bytes, str]]) -> dict[str, Any]:
    return {
        "files": [
            ("request", (None, json.dumps(request).encode(), "application/json")),
            *((name, (name, data, kind)) for name, (data, kind) in parts.items()),
        ]
    }


def test_an_image_sent_as_a_multipart_part_is_answered_as_the_same_image_inline(vision: TestClient) -> None:
    placeholder = "<image:" + "a" * 32 + ">"
    inline = {"state": f"look at {placeholder}", "questions": QUESTIONS, "assets": {placeholder: asset(IMG)}}
    parted = {**inline, "assets": {placeholder: {"type": "image", "part": "asset-0"}}}
    a = vision.post("/v1/systemone", json=inline)
    b = vision.post("/v1/systemone", **_multipart(parted, {"asset-0": (IMG, "image/png")}))
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    # The first computed its state, the second read it from the cache: equal to float rounding.
    assert same_to(b.json(), a.json(), 1e-6)
    other = vision.post("/v1/systemone", **_multipart(parted, {"asset-0": (image(7), "image/png")}))
    assert other.json()["answers"] != a.json()["answers"]


def test_a_video_and_an_image_as_parts(vision: TestClient) -> None:
    request = {
        "state": ["⟦img-1⟧", "⟦vid-1⟧", "What happens here?"],
        "questions": QUESTIONS,
        "assets": {"⟦img-1⟧": {"type": "image", "part": "asset-0"}, "⟦vid-1⟧": {"type": "video", "part": "asset-1"}},
    }
    response = vision.post(
        "/v1/systemone", **_multipart(request, {"asset-0": (IMG, "image/png"), "asset-1": (VID, "video/mp4")})
    )
    assert response.status_code == 200, response.text
    assert list(response.json()["answers"]) == list(QUESTIONS)


def test_decisions_keeps_each_questions_error_for_an_unreadable_asset(vision: TestClient) -> None:
    request = {"state": ["⟦img-1⟧", "x"], "questions": QUESTIONS, "assets": {"⟦img-1⟧": asset(b"not an image")}}
    single = vision.post("/v1/systemone", json=request)
    assert single.status_code == 400 and (single.json()["code"], single.json()["reason"]) == (
        "question_failed",
        "invalid_asset",
    )
    decisions = vision.post("/v1/decisions", json=request)
    assert decisions.status_code == 200
    for q_id, answer in decisions.json()["answers"].items():
        assert (answer["error"], answer["reason"]) == ("invalid_input", "invalid_asset"), q_id
    batch = vision.post(
        "/v1/systemone/batch", json={"requests": {"ok": {**request, "assets": {"⟦img-1⟧": asset(IMG)}}, "bad": request}}
    )
    assert batch.status_code == 400 and (batch.json()["state"], batch.json()["reason"]) == ("bad", "invalid_asset")


def test_the_listing_card_names_the_modalities_and_media_limits(vision: TestClient) -> None:
    card = vision.get("/v1/models").json()["models"][0]["card"]
    assert card["modalities"] == ["text", "image", "video"]
    assert card["limits"]["max_video_frames"] == 300 and card["limits"]["max_media_side"] == 1024
    assert "media_in_questions" not in card  # hybrid-vision reads media in the state only


@pytest.fixture(scope="module")
def heads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    folder = create(tmp_path_factory.mktemp("ckpt") / "tiny-vision-heads", "hybrid-vision-heads", seed=0)
    with serving(ServerSettings(str(folder))) as client:
        yield client


def test_every_question_type_over_http_with_a_multipart_image(heads: TestClient) -> None:
    placeholder = "<image:" + "b" * 32 + ">"
    request = {
        "state": f"{placeholder} Jane Doe sent this photo of her dog from jane@example.com.",
        "assets": {placeholder: {"type": "image", "part": "asset-0"}},
        "questions": {
            "urgent": NOUL,
            "tags": {"type": "set", "criteria": {"pets": None, "billing": None}, "threshold": 0.3},
            "pii": {
                "type": "span",
                "preset": "pii",
                "instructions": "Mark every piece of personal information in the text.",
                "criteria": {"person": None, "email": None},
            },
            "dog": {"type": "box", "instructions": "the dog"},
        },
        "options": {"return_meta": True},
    }
    response = heads.post("/v1/systemone", **_multipart(request, {"asset-0": (IMG, "image/png")}))
    assert response.status_code == 200, response.text
    doc = response.json()
    assert list(doc) == ["model", "answers", "usage", "spans", "sets", "thresholds", "span_heads", "meta"]
    assert list(doc["answers"]) == ["urgent", "tags", "pii", "dog"]
    assert doc["thresholds"] == {"tags": 0.3, "pii": 0.5} and doc["span_heads"] == {"pii": "pii"}
    assert set(doc["answers"]["dog"]["box"]) == {"top", "bottom", "left", "right"}
    card = heads.get("/v1/models").json()["models"][0]
    assert card["features"] == ["noul", "choice", "score", "set", "span", "box", "track"] and card["card"][
        "presets"
    ] == ["pii"]
    assert card["card"]["media_in_questions"] is True
