"""Every endpoint of `vllm-srun serve`, on the vllm-sr/5.0 and vllm-sr/4.0 schemas (seed 002)."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from systemone import REGISTRY

from .conftest import CHOICE, NOUL, SCORE, body, runtime


def schema(client: TestClient) -> str:
    return runtime(client).settings.schema


def test_one_request_answers_every_question_in_order(client: TestClient) -> None:
    response = client.post("/v1/systemone", json=body({"urgent": NOUL, "team": CHOICE, "anger": SCORE}))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    doc = response.json()
    assert list(doc) == ["model", "answers", "usage"]
    assert doc["model"] == "tiny-prefix-bidir"
    assert list(doc["answers"]) == ["urgent", "team", "anger"]
    assert 0 <= doc["answers"]["urgent"]["noul"] <= 1
    team = doc["answers"]["team"]
    assert team["choice"] == max(team["probabilities"], key=team["probabilities"].get)
    assert list(team["probabilities"]) == ["billing", "engineering", "other"]
    assert doc["answers"]["anger"]["legend"] == {"0": "calm", "1": "annoyed", "2": "furious"}
    assert doc["usage"]["output_tokens"] == 0 and doc["usage"]["input_tokens"] > 0


@pytest.mark.parametrize("model", ["jev-latest", "tiny-prefix-bidir", None])
def test_jev_latest_the_served_name_and_no_model_all_reach_the_model(client: TestClient, model: str | None) -> None:
    request = body() if model is None else body(model=model)
    response = client.post("/v1/systemone", json=request)
    assert response.status_code == 200
    assert response.json()["model"] == "tiny-prefix-bidir"


def test_the_runtime_answers_the_bytes_its_listener_codec_writes(client: TestClient) -> None:
    """Byte for byte: the response is what the codec writes for the same request and reply."""
    request = json.dumps(body({"team": CHOICE})).encode()
    response = client.post("/v1/systemone", content=request, headers={"content-type": "application/json"})
    codec = REGISTRY.listener(schema(client))
    req = codec.read("/v1/systemone", request)
    decisions = client.post("/v1/decisions", content=request)
    assert response.content == codec.answer_success(req, decisions.content)


def test_a_batch_answers_each_request_as_if_sent_alone_and_sums_usage(client: TestClient) -> None:
    doc_1 = body({"relevance": NOUL}, state="How long is the refund window?")
    doc_2 = body({"team": CHOICE, "anger": SCORE}, state="The export crashes with a 500 error.")
    response = client.post(
        "/v1/systemone/batch", json={"model": "jev-latest", "requests": {"doc_1": doc_1, "doc_2": doc_2}}
    )
    assert response.status_code == 200
    doc = response.json()
    assert list(doc) == ["model", "responses", "usage"]
    assert list(doc["responses"]) == ["doc_1", "doc_2"]
    alone = {
        name: client.post("/v1/systemone", json=item).json() for name, item in (("doc_1", doc_1), ("doc_2", doc_2))
    }
    for name, single in alone.items():
        assert doc["responses"][name]["answers"].keys() == single["answers"].keys()
        for q_id, answer in single["answers"].items():
            got = doc["responses"][name]["answers"][q_id]
            assert got["type"] == answer["type"]
            for key in ("noul", "score", "confidence"):
                if key in answer:
                    assert got[key] == pytest.approx(answer[key], abs=1e-5)
    assert doc["usage"]["input_tokens"] == sum(r["usage"]["input_tokens"] for r in alone.values())


def test_a_failed_question_fails_the_batch_and_state_names_its_request(client: TestClient) -> None:
    requests = {"ok": body(), "photo": body({"dog": {"type": "box", "instructions": "Where is the dog?"}})}
    response = client.post("/v1/systemone/batch", json={"requests": requests})
    assert response.status_code == 422
    doc = response.json()
    assert (doc["code"], doc["state"], doc["question"]) == ("question_failed", "photo", "dog")
    assert doc["detail"][0]["loc"] == ["body", "requests", "photo", "questions", "dog"]


def test_decisions_answers_failed_questions_in_a_200(client: TestClient) -> None:
    request = body(
        {
            "urgent": NOUL,
            "dog": {"type": "box", "instructions": "Where is the dog?"},
            "few": {"type": "choice", "criteria": {"a": None}},
        }
    )
    response = client.post("/v1/decisions", json=request)
    assert response.status_code == 200
    answers = response.json()["answers"]
    assert 0 <= answers["urgent"]["noul"] <= 1
    assert (answers["dog"]["type"], answers["dog"]["error"], answers["dog"]["reason"]) == (
        "box",
        "invalid_question",
        "unsupported_question_type",
    )
    assert answers["few"]["error"] == "invalid_question"  # failed reading (1 option): kept, not raised


def test_decisions_with_no_valid_question_is_400_listing_each(client: TestClient) -> None:
    request = body(
        {
            "few": {"type": "choice", "criteria": {"a": None}},
            "wide": {"type": "score", "criteria": [str(i) for i in range(11)]},
        }
    )
    response = client.post("/v1/decisions", json=request)
    assert response.status_code == 400
    doc = response.json()
    assert doc["code"] == "invalid_request" and doc["reason"] == "no_valid_question"
    assert "few:" in doc["detail"]["message"] and "wide:" in doc["detail"]["message"]


def test_models_lists_the_served_model_with_its_card(client: TestClient) -> None:
    response = client.get("/v1/models")
    assert response.status_code == 200
    (entry,) = response.json()["models"]
    assert entry["name"] == "tiny-prefix-bidir"
    assert isinstance(entry["description"], str) and entry["description"]
    assert len(entry["release_date"]) == 10 and entry["release_date"][4] == "-"  # YYYY-MM-DD
    assert entry["version"] == "5.0"
    assert entry["features"] == ["noul", "choice", "score", "set"]  # a set label by label, each as a noul
    card = entry["card"]
    assert card["question_types"] == ["noul", "choice", "score", "set"]
    assert card["presets"] == [] and card["modalities"] == ["text"]
    assert card["limits"] == {
        "max_options": 255,
        "max_labels": 255,
        "min_levels": 2,
        "max_levels": 10,
        "max_input_tokens": 16384,
    }
    if schema(client) == "vllm-sr/4.0":  # 4.0 clients read `data`
        assert response.json()["data"][0]["id"] == "tiny-prefix-bidir"


def test_health_reports_the_contract_and_readiness(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready",
        "ready": True,
        "api_version": "5.0.0",
        "model": "tiny-prefix-bidir",
        "schema": schema(client),
        "dtype": "float32",  # --dtype auto on CPU
    }


def test_metrics_count_requests_queue_passes_and_the_state_cache(client: TestClient) -> None:
    for _ in range(2):  # the same state twice: the second finds it in the cache
        assert client.post("/v1/systemone", json=body({"urgent": NOUL}, state="metrics: one state")).status_code == 200
    client.post("/v1/systemone", json={"state": "s"})
    text = client.get("/metrics").text
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert float(lines['vsr_runtime_requests_total{endpoint="/v1/systemone",status="200"}']) >= 2
    assert float(lines['vsr_runtime_requests_total{endpoint="/v1/systemone",status="422"}']) >= 1
    assert float(lines['vsr_runtime_request_seconds_count{endpoint="/v1/systemone"}']) >= 3
    assert lines["vsr_runtime_queue_depth"] == "0.0"
    assert float(lines["vsr_runtime_pass_requests_count"]) >= 2
    assert float(lines["vsr_runtime_state_cache_hits_total"]) >= 1
    assert float(lines["vsr_runtime_state_cache_misses_total"]) >= 1


def test_every_response_carries_a_request_id(client: TestClient) -> None:
    ids = {
        client.post("/v1/systemone", json=body()).headers["x-typesafe-request-id"],
        client.post("/v1/systemone", content=b"{").headers["x-typesafe-request-id"],
        client.get("/health").headers["x-typesafe-request-id"],
        client.get("/nowhere").headers["x-typesafe-request-id"],
    }
    assert len(ids) == 4 and all(i.startswith("req_") for i in ids)


@pytest.mark.parametrize(
    ("method", "path", "status"), [("GET", "/v1/nowhere", 404), ("POST", "/", 404), ("GET", "/v1/systemone", 405)]
)
def test_other_routes_are_json_errors_naming_what_is_served(
    client: TestClient, method: str, path: str, status: int
) -> None:
    response = client.request(method, path)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert "POST /v1/systemone, /v1/systemone/batch, /v1/decisions" in response.json()["detail"]["message"]


def test_return_meta_adds_timings_beside_the_answers(client: TestClient) -> None:
    response = client.post("/v1/systemone", json=body(options={"return_meta": True}))
    meta = response.json()["meta"]
    assert (
        set(meta) == {"tokens_read", "state_cache_hit", "queue_ms", "inference_ms", "batched_requests"}
        and meta["batched_requests"] >= 1
    )
