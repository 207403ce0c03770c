"""The sidecar's parts that need no network: its data, the version store, keys, LLM routing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from google.protobuf import json_format

from sr_control.compiler.protos import SIDECAR
from sr_control.extproc import llm
from sr_control.extproc.auth import KeyRing, KeysUnavailable
from sr_control.extproc.data import AuthRef, DataError, ListenerData
from sr_control.extproc.envoy import Answer, Forward
from sr_control.extproc.incoming import Incoming
from sr_control.extproc.versions import VersionStore
from tests.compiler.compiled import compile_text

CONFIG = """
version: 2
providers:
  models:
    - {name: chat, api_format: chat_completions, endpoints: ["http://10.0.0.1:8000/openai/v1"], api_key_env: KEY}
    - {name: judge, api_format: systemone, schema: vllm-sr/5.0, endpoints: ["http://10.0.0.2:8100/v1/systemone"]}
deployments:
  a: {provider: systemone, endpoint: "http://10.0.0.3:8100/v1/systemone", model: d3, schema: vllm-sr/5.0}
  b: {provider: systemone, endpoint: "https://gw.example/api/v1/systemone", model: d3-gw, deviations: [state_text],
      max_concurrency: 3, capabilities: {question_types: [noul]}}
pools:
  vllm-sr/auto: {members: [a, b]}
listeners:
  - name: public
    port: 8801
    auth: {keys_env: LISTENER_KEYS}
    apis:
      systemone: {schema: vllm-sr/4.0, models: [vllm-sr/auto, d3, judge], max_deadline_ms: 2500}
      chat_completions: {models: [chat]}
"""


def data_of(text: str = CONFIG, listener: str = "public") -> ListenerData:
    resource = compile_text(text).named(SIDECAR)[f"sidecar/{listener}"]
    payload = json_format.MessageToDict(resource.message.value)
    return ListenerData.of(payload, resource.version)


def test_the_compiled_sidecar_data_reads_as_the_config_says() -> None:
    data = data_of()
    assert (
        data.systemone is not None and data.systemone.schema == "vllm-sr/4.0" and data.systemone.max_deadline_ms == 2500
    )
    assert data.default_model() == "vllm-sr/auto"
    name, members = data.resolve(None)  # type: ignore[misc]
    assert name == "vllm-sr/auto" and [m.name for m in members] == ["a", "b"]
    assert data.resolve("jev-latest") == data.resolve("vllm-sr/auto")
    assert data.resolve("gpt") is None
    b = data.members["b"]
    assert (b.schema, b.deviations, b.max_concurrency, b.declared.question_types if b.declared else None) == (
        "systemone/0.2",
        ("state_text",),
        3,
        frozenset({"noul"}),
    )
    assert (b.origin, b.prefix, b.path("/v1/decisions"), b.systemone_path) == (
        "https://gw.example",
        "/api",
        "/api/v1/decisions",
        "/api/v1/systemone",
    )
    judge = data.resolve("judge")[1][0]  # type: ignore[index]
    assert judge.schema == "vllm-sr/5.0" and judge.cluster == "provider/judge"
    assert data.providers["chat"].base_path == "/openai/v1" and data.providers["chat"].api_key_env == "KEY"
    assert data.auth == AuthRef(keys_env="LISTENER_KEYS")


def test_data_naming_what_it_does_not_describe_is_refused() -> None:
    with pytest.raises(DataError, match="names members it does not describe: ghost"):
        ListenerData.of({"listener": "l", "apis": [], "models": {"m": {"pool": ["ghost"]}}}, "v1")
    with pytest.raises(DataError, match="version v2"):
        ListenerData.of({"apis": [{"no-api-key": 1}]}, "v2")


def test_versions_are_kept_waited_for_and_dropped_once_unused() -> None:
    now = [0.0]
    store = VersionStore(retention_s=10, clock=lambda: now[0])
    first = data_of()
    store.add(first)

    async def scenario() -> None:
        assert await store.wait(first.version, 0.01) is first
        waiting = asyncio.ensure_future(store.wait("next", 1.0))
        await asyncio.sleep(0.01)
        later = ListenerData(first.listener, "next", first.offers, first.models, first.members, first.providers)
        store.add(later)
        assert await waiting is later
        assert await store.wait("never", 0.05) is None

    asyncio.run(scenario())
    now[0] = 5.0
    assert store.get(first.version) is first  # a request named it at t=5
    now[0] = 14.0
    store.prune()
    assert store.get(first.version) is first  # unused for 9 s < 10 s
    now[0] = 30.0
    store.prune()
    assert store.get(first.version) is None and store.get("next") is not None  # the newest always stays


def test_listener_keys_from_the_environment_and_from_a_file(tmp_path: Path) -> None:
    ring = KeyRing({"KEYS": "k1, k2\nk3"})
    env = AuthRef(keys_env="KEYS")
    assert ring.check(env, "Bearer k2").ok and ring.check(env, "bearer k3").ok
    assert ring.check(env, "Bearer nope").reason == "invalid_key"
    assert ring.check(env, None).reason == "missing_key" and ring.check(env, "Basic k1").reason == "missing_key"
    with pytest.raises(KeysUnavailable, match="MISSING"):
        ring.check(AuthRef(keys_env="MISSING"), "Bearer k1")
    keys = tmp_path / "keys"
    keys.write_text("# one a line\nfile-key  # trailing comment\n\n")
    assert ring.check(AuthRef(keys_file=str(keys)), "Bearer file-key").ok
    with pytest.raises(KeysUnavailable, match="cannot be read"):
        ring.check(AuthRef(keys_file=str(tmp_path / "absent")), "Bearer x")


def incoming(api: str, path: str, data: ListenerData | None = None) -> Incoming:
    return Incoming("public", api, data or data_of(), "POST", path, {}, "rid")


def test_llm_requests_go_to_their_models_provider_and_never_carry_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Envoy adds the provider's key (compiler/credentials.py): the sidecar's answer has none, even
    when the variable is in the sidecar's environment."""
    monkeypatch.setenv("KEY", "sk-provider")
    out = llm.route(
        incoming("chat_completions", "/v1/chat/completions?key=q"), b'{"model": "chat", "messages": [], "stream": true}'
    )
    assert isinstance(out, Forward)
    assert out.cluster == "provider/chat" and out.path == "/openai/v1/chat/completions?key=q"
    assert ("x-envoy-original-path", "/v1/chat/completions") in out.set_headers  # the query may hold a client's key
    assert "sk-provider" not in repr(out) and "authorization" not in dict(out.set_headers)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b'{"model": "gpt-9"}', 404, "model_not_found"),
        (b'{"messages": []}', 400, "missing_model"),
        (b"{", 400, "invalid_json"),
        (b'{"model": 7}', 400, "missing_model"),
    ],
)
def test_llm_errors_are_the_apis_own(body: bytes, status: int, code: str) -> None:
    out = llm.route(incoming("chat_completions", "/v1/chat/completions"), body)
    assert isinstance(out, Answer) and out.status == status
    import json

    assert json.loads(out.body)["error"]["code"] == code


def test_bodies_already_in_the_form_the_other_side_reads_are_left_as_they_are() -> None:
    """A 5.0 request whose internal form is the client's own bytes goes upstream untouched, and a
    re-encoded reply that is the member's own bytes is not handed back to Envoy: no body to swap.
    Anything else is replaced, with its content-length."""
    import json

    from sr_control.extproc.envoy import replace_response
    from sr_control.extproc.forward import member_body
    from systemone.listener import LISTENERS

    # The internal form writes every member the runtime reads (roles included) in this order.
    request = {
        "model": "d3",
        "state": "The export fails.",
        "questions": {"u": {"type": "noul", "instructions": "Is it urgent?"}},
        "roles": None,
    }
    as_the_sdk_writes = json.dumps(request).encode()
    compact = json.dumps(request, separators=(",", ":")).encode()
    codec = LISTENERS["vllm-sr/5.0"]
    for sent in (as_the_sdk_writes, compact):
        req = codec.read("/v1/systemone", sent, [("content-type", "application/json")])
        assert req.plan.kind == "convert"  # a 5.0 listener's /v1/systemone
        body, form = member_body(req, sent, "d3")
        assert form == "convert"
        assert body == (None if sent == as_the_sdk_writes else req.plan.body)
        assert req.plan.body == as_the_sdk_writes  # the internal form, whatever the spacing sent
    assert member_body(codec.read("/v1/systemone", as_the_sdk_writes, []), as_the_sdk_writes, "d3-gw")[
        0
    ] == as_the_sdk_writes.replace(b'"d3"', b'"d3-gw"')

    reply = b'{"model": "d3", "answers": {"u": {"type": "noul", "noul": 0.8}}}'
    kept = replace_response(Answer(200, (("x-request-id", "r1"),), reply), 200, reply).response_body.response
    assert not kept.HasField("body_mutation")
    assert [h.header.key for h in kept.header_mutation.set_headers] == ["x-request-id"]
    swapped = replace_response(
        Answer(200, (("x-request-id", "r1"),), reply), 200, reply.replace(b": ", b":")
    ).response_body.response
    assert swapped.body_mutation.body == reply
    assert ("content-length", str(len(reply)).encode()) in [
        (h.header.key, h.header.raw_value) for h in swapped.header_mutation.set_headers
    ]
