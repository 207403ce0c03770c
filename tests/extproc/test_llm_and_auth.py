"""LLM APIs and listener keys through the sidecar, with a real Envoy and an echoing provider."""

from __future__ import annotations

import json

import pytest
from jevcompat import runner

from tests.extproc.conftest import LISTENER_KEY
from tests.extproc.harness import World

pytestmark = pytest.mark.envoy

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def test_the_body_model_picks_the_provider_its_path_and_its_key(world: World) -> None:
    a = world.post("chat", "/v1/chat/completions", {"model": "chat-a", **CHAT}, authorization="Bearer client-own-key")
    assert a.status == 200, a.body
    seen = a.json()
    assert seen["path"] == "/v1/chat/completions" and seen["x-vsr-cluster"] is None
    assert seen["authorization"] == "Bearer client-own-key"  # no key configured: the client's goes on
    b = world.post("chat", "/v1/chat/completions", {"model": "chat-b", **CHAT}).json()
    assert b["path"] == "/openai/v1/chat/completions"  # the provider's base path
    assert b["authorization"] == "Bearer provider-key-1"  # added by Envoy, from its environment
    claude = world.post("chat", "/v1/messages", {"model": "claude-x", "max_tokens": 5, **CHAT}).json()
    assert claude["x-api-key"] == "provider-key-1" and claude["authorization"] is None
    assert a.headers["x-typesafe-request-id"] == a.headers["x-request-id"] == seen["x-request-id"]


def test_an_unknown_model_is_404_in_the_apis_own_shape(world: World) -> None:
    openai = world.post("chat", "/v1/chat/completions", {"model": "gpt-9", **CHAT})
    assert openai.status == 404
    error = openai.json()["error"]
    assert error["code"] == "model_not_found" and error["type"] == "invalid_request_error" and error["param"] == "model"
    assert "gpt-9" in error["message"] and "'chat'" in error["message"] and "chat-a, chat-b" in error["message"]
    anthropic = world.post("chat", "/v1/messages", {"model": "chat-a", **CHAT})  # offered on chat_completions only
    assert anthropic.status == 404
    assert anthropic.json()["type"] == "error" and anthropic.json()["error"]["type"] == "not_found_error"
    missing = world.post("chat", "/v1/chat/completions", CHAT)
    assert missing.status == 400 and missing.json()["error"]["param"] == "model"


def test_a_listener_with_keys_refuses_before_any_upstream_sees_the_request(world: World) -> None:
    body = {"state": "x", "questions": {"q": {"type": "noul", "instructions": "Is it x?"}}}
    none = world.post("keyed", "/v1/systemone", body)
    assert (
        none.status == 401
        and none.json()["detail"]["error_type"] == "authentication_error"
        and none.json()["reason"] == "missing_key"
    )
    wrong = world.post("keyed", "/v1/systemone", body, authorization="Bearer nope")
    assert wrong.status == 401 and wrong.json()["reason"] == "invalid_key"
    assert world.get("keyed", "/v1/models").status == 401
    assert world.post("keyed", "/v1/systemone", body, authorization=f"Bearer {LISTENER_KEY}").status == 200
    chat = world.post(
        "keyed", "/v1/chat/completions", {"model": "chat-a", **CHAT}, authorization=f"Bearer {LISTENER_KEY}"
    )
    assert chat.status == 200 and chat.json()["authorization"] is None  # the listener's key stays here
    denied = world.post("keyed", "/v1/chat/completions", {"model": "chat-a", **CHAT})
    assert denied.status == 401 and denied.json()["error"]["code"] == "invalid_api_key"


def test_listener_keys_follow_their_file(world: World) -> None:
    keys = world.extra["keys"]
    old = keys.read_text()
    body = {"state": "x", "questions": {"q": {"type": "noul", "instructions": "Is it x?"}}}
    try:
        keys.write_text("rotated-key\n")
        import time

        time.sleep(1.2)  # the file is looked at once a second
        assert world.post("keyed", "/v1/systemone", body, authorization="Bearer rotated-key").status == 200
        assert world.post("keyed", "/v1/systemone", body, authorization=f"Bearer {LISTENER_KEY}").status == 401
    finally:
        keys.write_text(old)
        time.sleep(1.2)


def test_the_keys_never_reach_the_config_or_the_ads_stream(world: World) -> None:
    config = world.plane.config.read_text()
    dump = json.dumps(world.plane.plane.status())
    for key in (LISTENER_KEY, "provider-key-1", "runtime-key-1"):
        assert key not in config and key not in dump
    from sr_control.compiler.output import as_discovery_response
    from sr_control.compiler.protos import SIDECAR

    snapshot = world.plane.plane.reloader.snapshot
    assert snapshot is not None
    served = json.dumps(as_discovery_response(snapshot.resources, SIDECAR))
    assert str(world.extra["keys"]) in served and LISTENER_KEY not in served


@pytest.mark.slow
def test_jevcompat_is_conformant_through_a_listener_with_keys(world: World) -> None:
    report = runner.run(world.url("keyed"), key=LISTENER_KEY, timeout=60)
    failed = {r.id: [f.message for f in r.findings] for r in report.results if r.status == "fail"}
    assert report.verdict == "conformant", failed
    assert report.summary()["MUST"]["passed"] == 32
    assert set(failed) <= {"request.unknown-fields"}  # vllm-sr/5.0 names unknown members (docs/runtime/conformance.md)
