"""What the official clients send: Bearer keys, zstd bodies, multipart bodies with asset parts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard
from starlette.testclient import TestClient

from sr_runtime.server import ServerSettings
from systemone.errors import MAX_BODY_BYTES
from tests.conftest import same_to

from .conftest import CHOICE, NOUL, SCHEMAS, body, serving

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64


def test_a_zstd_body_is_read_like_the_plain_one(client: TestClient) -> None:
    raw = json.dumps(body({"urgent": NOUL, "team": CHOICE})).encode()
    plain = client.post("/v1/systemone", content=raw)
    packed = client.post("/v1/systemone", content=zstandard.compress(raw), headers={"content-encoding": "zstd"})
    assert packed.status_code == 200
    # The first computed its state, the second read it from the cache: equal to float rounding.
    assert same_to(packed.json()["answers"], plain.json()["answers"], 1e-6)


def test_a_zstd_bomb_is_413_on_its_decoded_size(client: TestClient) -> None:
    bomb = zstandard.compress(b" " * (MAX_BODY_BYTES + 1))
    assert len(bomb) < 64 * 1024
    response = client.post("/v1/systemone", content=bomb, headers={"content-encoding": "zstd"})
    assert response.status_code == 413 and response.json()["code"] == "request_too_large"


def test_a_body_that_is_not_zstd_or_an_unknown_encoding_is_refused(client: TestClient) -> None:
    broken = client.post("/v1/systemone", content=b"not zstd at all", headers={"content-encoding": "zstd"})
    assert broken.status_code == 400 and "not valid zstd" in broken.json()["detail"]["message"]
    gzip = client.post("/v1/systemone", content=b"x", headers={"content-encoding": "gzip"})
    assert gzip.status_code == 415 and "zstd or none" in gzip.json()["detail"]["message"]


def _multipart(request: dict, parts: dict[str, bytes]) -> dict:
    return {
        "files": [
            ("request", (None, json.dumps(request).encode(), "application/json")),
            *((name, (name, data, "image/png")) for name, data in parts.items()),
        ]
    }


def test_multipart_reads_the_request_part_and_checks_each_asset_part(client: TestClient) -> None:
    text_only = client.post("/v1/systemone", **_multipart(body(), {}))
    assert text_only.status_code == 200 and list(text_only.json()["answers"]) == ["urgent"]
    placeholder = "<image:" + "0" * 32 + ">"
    request = body(
        {"dog": {"type": "box", "instructions": "the dog"}},
        state=f"look at {placeholder}",
        assets={placeholder: {"type": "image", "part": "asset-0"}},
    )
    box = client.post("/v1/systemone", **_multipart(request, {"asset-0": PNG}))
    assert (
        box.status_code == 422 and box.json()["reason"] == "unsupported_question_type"
    )  # read whole, answered as documented
    image_noul = client.post(
        "/v1/systemone", **_multipart({**request, "questions": {"urgent": NOUL}}, {"asset-0": PNG})
    )
    assert image_noul.status_code == 400 and image_noul.json()["reason"] == "unsupported_media"


def test_multipart_parts_must_match_the_assets_that_claim_them(client: TestClient) -> None:
    placeholder = "<image:" + "1" * 32 + ">"
    request = body(state=f"see {placeholder}", assets={placeholder: {"type": "image", "part": "asset-0"}})
    missing = client.post("/v1/systemone", **_multipart(request, {}))
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "assets", placeholder, "part"]
    unclaimed = client.post("/v1/systemone", **_multipart(body(), {"asset-7": PNG}))
    assert unclaimed.status_code == 422 and "no asset claims it" in unclaimed.json()["detail"][0]["msg"]
    no_request = client.post("/v1/systemone", files=[("other", (None, b"{}", "application/json"))])
    assert no_request.status_code == 422 and no_request.json()["detail"][0]["loc"] == ["body", "request"]


@pytest.fixture(scope="module", params=SCHEMAS)
def secured(request: pytest.FixtureRequest, checkpoint: Path) -> Iterator[TestClient]:
    with serving(ServerSettings(str(checkpoint), schema=request.param, api_key="sekrit")) as client:
        yield client


def test_with_auth_on_the_bearer_key_is_required(secured: TestClient) -> None:
    assert secured.post("/v1/systemone", json=body(), headers={"Authorization": "Bearer sekrit"}).status_code == 200
    for headers, reason in (
        ({}, "missing_key"),
        ({"Authorization": "Bearer nope"}, "invalid_key"),
        ({"Authorization": "sekrit"}, "missing_key"),
    ):
        refused = secured.post("/v1/systemone", json=body(), headers=headers)
        assert refused.status_code == 401
        doc = refused.json()
        assert doc["detail"]["error_type"] == "authentication_error" and doc["reason"] == reason
    assert secured.get("/v1/models").status_code == 401


def test_health_and_metrics_need_no_key(secured: TestClient) -> None:
    assert secured.get("/health").status_code == 200
    assert secured.get("/metrics").status_code == 200


def test_with_auth_off_an_authorization_header_is_ignored(client: TestClient) -> None:
    assert client.post("/v1/systemone", json=body(), headers={"Authorization": "Bearer anything"}).status_code == 200
