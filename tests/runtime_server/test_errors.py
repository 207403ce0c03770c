"""Every row of seed 002's error table, on the vllm-sr/5.0 and vllm-sr/4.0 schemas.

A 4.0 server writes each error as 5.0 does plus 4.0's `error` object; the checks read the
standard `detail` and the flat fields, which both carry.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import save_file
from starlette.testclient import TestClient

from sr_runtime.engine import Engine
from sr_runtime.server import ServerSettings
from systemone.errors import MAX_BODY_BYTES

from .conftest import CHOICE, NOUL, SCHEMAS, HeldEngine, body, engine_loader, runtime, serving, wait_until

DOCS = Path(__file__).parents[2] / "docs" / "runtime" / "server.md"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()


def error(response: httpx.Response, status: int, code: str, reason: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    doc = response.json()
    assert doc["code"] == code
    if reason is not None:
        assert doc["reason"] == reason
    if "error" in doc:  # 4.0 clients read the same error from `error`
        assert doc["error"]["code"] == code and doc["error"]["message"]
    return doc


@pytest.fixture(params=SCHEMAS)
def schema(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def held(checkpoint: Path) -> Iterator[HeldEngine]:
    engine = HeldEngine(Engine.load(checkpoint))
    yield engine
    engine.release.set()


def test_422_invalid_question_for_a_type_or_field_the_model_does_not_answer(client: TestClient) -> None:
    response = client.post(
        "/v1/systemone", json=body({"urgent": NOUL, "dog": {"type": "box", "instructions": "Where is the dog?"}})
    )
    doc = error(response, 422, "question_failed", "unsupported_question_type")
    assert doc["question"] == "dog"
    assert doc["detail"] == [
        {
            "loc": ["body", "questions", "dog"],
            "msg": 'question "dog" cannot be answered: this model answers noul, choice, score, set questions, not box',
            "type": "invalid_question",
        }
    ]
    over = client.post("/v1/systemone", json=body({"urgent": {**NOUL, "over": ["request"]}}, state={"request": "x"}))
    assert "does not take over" in error(over, 422, "question_failed", "unsupported_field")["detail"][0]["msg"]


def test_the_first_unanswerable_question_in_request_order_fails_the_request(client: TestClient) -> None:
    questions = {"ok": NOUL, "first": {"type": "box"}, "second": {**NOUL, "decision_adapter": "x"}}
    assert error(client.post("/v1/systemone", json=body(questions)), 422, "question_failed")["question"] == "first"


def test_400_max_length_exceeded_past_the_validated_length_without_the_header(
    short_checkpoint: Path, schema: str
) -> None:
    """As docs/runtime/server.md shows it: a checkpoint validated at 2,048 tokens."""
    long_state = "The export fails again today. " * 400
    shown = re.search(r"\*\*Validated length\.\*\*.*?```json\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert shown is not None
    with serving(ServerSettings(str(short_checkpoint), schema=schema, max_model_len=8192)) as client:
        refused = client.post("/v1/systemone", json=body(state=long_state))
        doc = error(refused, 400, "question_failed", "max_length_exceeded")
        assert {k: v for k, v in doc.items() if k != "error"} == json.loads(shown.group(1))
        allowed = client.post(
            "/v1/systemone", json=body(state=long_state), headers={"TypeSafe-Danger-Zone-Long-Context": "true"}
        )
        assert allowed.status_code == 200
        too_long = client.post(
            "/v1/systemone", json=body(state=long_state * 4), headers={"TypeSafe-Danger-Zone-Long-Context": "true"}
        )
        assert (
            "longer than the model's maximum length 8192"
            in error(too_long, 400, "question_failed")["detail"]["message"]
        )


def test_400_scan_budget_exceeded_over_options_max_tokens(client: TestClient) -> None:
    response = client.post("/v1/systemone", json=body(options={"max_tokens": 5}))
    assert (
        "over the scan budget options.max_tokens = 5"
        in error(response, 400, "question_failed", "scan_budget_exceeded")["detail"]["message"]
    )
    assert client.post("/v1/systemone", json=body(options={"max_tokens": 100_000})).status_code == 200


def test_400_invalid_input_for_media_on_a_text_model(client: TestClient) -> None:
    request = body(state="Look at <img>", assets={"<img>": {"type": "image", "format": "png", "data_base64": PNG}})
    doc = error(client.post("/v1/systemone", json=request), 400, "question_failed", "unsupported_media")
    assert "this model reads text only; the request carries image assets" in doc["detail"]["message"]


def test_400_invalid_request_names_every_unknown_member(client: TestClient) -> None:
    request = body({"urgent": {**NOUL, "weight": 2}}, temperature=0.5)
    doc = error(client.post("/v1/systemone", json=request), 400, "invalid_request", "unknown_member")
    assert "temperature" in doc["detail"]["message"] and "questions.urgent.weight" in doc["detail"]["message"]


def test_400_for_a_model_this_server_does_not_serve(client: TestClient) -> None:
    doc = error(
        client.post("/v1/systemone", json=body(model="vllm-sr/vela3-fast")), 400, "invalid_request", "unknown_model"
    )
    assert doc["detail"] == {
        "error_type": "api_usage_error",
        "message": (
            "Unknown model: vllm-sr/vela3-fast (this server serves 'tiny-prefix-bidir'; 'jev-latest' or no model "
            "also mean it)"
        ),
    }


def test_413_request_too_large_over_32_mib(client: TestClient) -> None:
    response = client.post(
        "/v1/systemone", content=b" " * (MAX_BODY_BYTES + 1), headers={"content-type": "application/json"}
    )
    assert error(response, 413, "request_too_large")["limit"] == MAX_BODY_BYTES


def test_422_for_a_body_that_is_not_a_request(client: TestClient) -> None:
    doc = error(client.post("/v1/systemone", content=b'{"state": "x", "questions": {'), 422, "invalid_request")
    assert doc["detail"][0]["type"] == "json_invalid" and doc["detail"][0]["loc"][0] == "body"


@pytest.fixture(scope="module")
def broken_checkpoint(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real checkpoint whose readout weights are NaN: the model cannot give a distribution."""
    folder = Path(shutil.copytree(checkpoint, tmp_path_factory.mktemp("broken") / "nan-readout"))
    codes = len(json.loads((folder / "decision_config.json").read_text())["codes"])
    hidden = json.loads((folder / "config.json").read_text())["hidden_size"]
    save_file({"weight": torch.full((codes, hidden), float("nan"))}, str(folder / "readout.safetensors"))
    return folder


def test_500_invalid_model_output_when_the_model_gives_no_distribution(broken_checkpoint: Path, schema: str) -> None:
    with serving(ServerSettings(str(broken_checkpoint), schema=schema)) as client:
        doc = error(
            client.post("/v1/systemone", json=body({"team": CHOICE})), 500, "question_failed", "invalid_model_output"
        )
        assert doc["question"] == "team" and doc["detail"]["error_type"] == "unknown"


def test_503_unavailable_with_retry_after_while_the_model_loads(checkpoint: Path, schema: str) -> None:
    gate = threading.Event()
    engine = Engine.load(checkpoint)

    def load() -> tuple[Engine, str]:
        assert gate.wait(60)
        return engine, "2026-01-01"

    with serving(ServerSettings(str(checkpoint), schema=schema), load, wait=False) as client:
        loading = client.post("/v1/systemone", json=body())
        error(loading, 503, "unavailable", "model_loading")
        assert (loading.headers["retry-after"], loading.headers["retry-after-ms"]) == ("1", "1000")
        assert client.get("/health").status_code == 503 and client.get("/health").json()["status"] == "loading"
        assert client.get("/v1/models").status_code == 503
        assert client.post("/v1/systemone", content=b"{").status_code == 422  # a bad request is still a 4xx
        gate.set()
        assert runtime(client).wait(60)
        assert client.post("/v1/systemone", json=body()).status_code == 200


def test_504_deadline_exceeded_past_options_deadline_ms(checkpoint: Path, held: HeldEngine, schema: str) -> None:
    with serving(ServerSettings(str(checkpoint), schema=schema), engine_loader(held)) as client:
        doc = error(
            client.post("/v1/systemone", json=body(options={"deadline_ms": 50})),
            504,
            "question_failed",
            "deadline_exceeded",
        )
        assert (
            "options.deadline_ms (50 ms) passed" in doc["detail"]["message"]
            and doc["detail"]["error_type"] == "timeout"
        )
        held.release.set()
        assert client.post("/v1/systemone", json=body(options={"deadline_ms": 60_000})).status_code == 200


def test_a_request_whose_deadline_passed_in_the_queue_never_runs(
    checkpoint: Path, held: HeldEngine, schema: str
) -> None:
    with (
        serving(ServerSettings(str(checkpoint), schema=schema), engine_loader(held)) as client,
        ThreadPoolExecutor(2) as pool,
    ):
        first = pool.submit(client.post, "/v1/systemone", json=body())
        assert held.entered.wait(30)
        late = client.post("/v1/systemone", json=body(state="queued behind", options={"deadline_ms": 20}))
        error(late, 504, "question_failed", "deadline_exceeded")
        held.release.set()
        assert first.result().status_code == 200
        assert client.post("/v1/systemone", json=body(state="after")).status_code == 200
        assert held.calls == [1, 1]  # the first request, then the last: the late one was dropped


def test_529_with_retry_after_when_the_queue_is_full(checkpoint: Path, held: HeldEngine, schema: str) -> None:
    settings = ServerSettings(str(checkpoint), schema=schema, max_queue=1)
    with serving(settings, engine_loader(held)) as client, ThreadPoolExecutor(2) as pool:
        running = pool.submit(client.post, "/v1/systemone", json=body(state="running"))
        assert held.entered.wait(30)
        waiting = pool.submit(client.post, "/v1/systemone", json=body(state="waiting"))
        wait_until(lambda: runtime(client).scheduler.depth == 1, "the second request to wait")  # type: ignore[union-attr]
        full = client.post("/v1/systemone", json=body(state="one too many"))
        doc = error(full, 529, "overloaded", "queue_full")
        assert doc["detail"]["error_type"] == "overloaded_error"
        assert (full.headers["retry-after"], full.headers["retry-after-ms"]) == ("1", "1000")
        held.release.set()
        assert running.result().status_code == 200 and waiting.result().status_code == 200
