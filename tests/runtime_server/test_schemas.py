"""`--systemone-schema`: 4.0 clients served directly; systemone/0.2 as the bare standard."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from sr_runtime.server import ServerSettings, SettingsError

from .conftest import NOUL, body, serving


@pytest.fixture(scope="module")
def legacy(checkpoint: Path) -> Iterator[TestClient]:
    with serving(ServerSettings(str(checkpoint), schema="vllm-sr/4.0")) as client:
        yield client


@pytest.fixture(scope="module")
def current(checkpoint: Path) -> Iterator[TestClient]:
    with serving(ServerSettings(str(checkpoint))) as client:
        yield client


@pytest.fixture(scope="module")
def strict(checkpoint: Path) -> Iterator[TestClient]:
    with serving(ServerSettings(str(checkpoint), schema="systemone/0.2")) as client:
        yield client


def test_a_40_server_answers_the_40_forms(legacy: TestClient) -> None:
    request = {
        "states": ["The export crashes.", "Thanks, all good."],
        "questions": {
            "team": {"type": "choice", "choices": ["billing", "engineering"]},
            "tags": {"type": "set", "labels": ["refund", "bug"]},
        },
    }
    response = legacy.post("/v1/systemone", json=request)
    assert response.status_code == 200
    doc = response.json()
    assert [list(a)[:2] for a in doc["answers"]] == [["team", "tags"], ["team", "tags"]]  # one entry per state
    assert set(doc["answers"][0]["team"]["probabilities"]) == {"billing", "engineering"}
    assert [set(s["tags"]["probabilities"]) for s in doc["sets"]] == [{"refund", "bug"}] * 2  # 4.0: sets per state
    # A preset-only question needs the preset's trained head, which this model does not have.
    refused = legacy.post(
        "/v1/systemone", json={**request, "questions": {"jb": {"type": "noul", "preset": "jailbreak"}}}
    )
    assert refused.status_code == 422 and refused.json()["error"]["reason"] == "unsupported_preset"


def test_a_40_error_carries_both_detail_and_error(legacy: TestClient) -> None:
    doc = legacy.post("/v1/systemone", json=body({"dog": {"type": "box"}})).json()
    assert doc["detail"][0]["type"] == "invalid_question"
    assert doc["error"]["code"] == "question_failed" and doc["error"]["question"] == "dog"


def test_a_50_server_refuses_the_40_forms_naming_them(current: TestClient) -> None:
    doc = current.post("/v1/systemone", json=body({"team": {"type": "choice", "choices": ["a", "b"]}})).json()
    assert doc["code"] == "invalid_request" and "questions.team.choices" in doc["detail"]["message"]


def test_the_strict_standard_ignores_unknown_members_and_refuses_extensions(strict: TestClient) -> None:
    assert strict.post("/v1/systemone", json=body(model="jev-latest", x_trace="t1", seed=7)).status_code == 200
    refused = strict.post(
        "/v1/systemone", json=body(model="jev-latest", roles={"request": "user"}, state={"request": "x"})
    )
    assert refused.status_code == 400
    assert refused.json() == {
        "detail": {"error_type": "api_usage_error", "message": "systemone/0.2 does not define this member: roles"}
    }


def test_the_strict_standard_answers_with_standard_members_only(strict: TestClient) -> None:
    answer = strict.post("/v1/systemone", json=body({"urgent": {**NOUL}}, model="jev-latest"))
    assert answer.status_code == 200 and list(answer.json()) == ["model", "answers", "usage"]
    (entry,) = strict.get("/v1/models").json()["models"]
    assert list(entry) == ["name", "description", "release_date"]
    error = strict.post("/v1/systemone", json=body({"dog": {"type": "box"}}, model="jev-latest")).json()
    assert list(error) == ["detail"]


def test_the_strict_standard_serves_one_endpoint(strict: TestClient) -> None:
    for path in ("/v1/systemone/batch", "/v1/decisions"):
        response = strict.post(path, json=body(model="jev-latest"))
        assert response.status_code == 404 and "serves /v1/systemone" in response.json()["detail"]["message"]


def test_an_unknown_schema_is_refused_at_start() -> None:
    with pytest.raises(
        SettingsError,
        match=r"--systemone-schema 'vllm-sr/6.0' is not served \(supported: vllm-sr/5.0, vllm-sr/4.0, systemone/0.2\)",
    ):
        ServerSettings("default", schema="vllm-sr/6.0")
