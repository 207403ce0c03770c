"""The API registry: names, aliases, paths and defaults from seed 000's table."""

from __future__ import annotations

import dataclasses

import pytest

from sr_control.apis import LLM_APIS, REGISTRY, Api, ApiRegistry, UnknownApiError
from systemone import schemas


def test_the_registry_holds_seed_000s_table() -> None:
    table = {api.name: (api.paths, api.listener_schema, api.upstream_schema, api.other_schemas) for api in REGISTRY}
    assert table == {
        "chat_completions": (("/v1/chat/completions",), None, None, ()),
        "responses": (("/v1/responses",), None, None, ()),
        "messages": (("/v1/messages",), None, None, ()),
        "images": (("/v1/images/*",), None, None, ()),
        "systemone": (
            ("/v1/systemone", "/v1/systemone/batch", "/v1/decisions"),
            "vllm-sr/5.0",
            "systemone/0.2",
            ("vllm-sr/4.0",),
        ),
    }
    assert LLM_APIS == ("chat_completions", "responses", "messages", "images")


@pytest.mark.parametrize(
    "alias,name", [("openai", "chat_completions"), ("anthropic", "messages"), ("systemone", "systemone")]
)
def test_aliases_resolve_wherever_a_name_appears(alias: str, name: str) -> None:
    assert REGISTRY.canonical(alias) == name
    assert REGISTRY.get(alias).name == name
    assert alias in REGISTRY


def test_an_unknown_name_lists_the_supported_ones() -> None:
    with pytest.raises(UnknownApiError) as err:
        REGISTRY.get("grpc")
    assert (
        str(err.value)
        == "unknown API 'grpc' (supported: chat_completions, responses, messages, images, systemone, openai, anthropic)"
    )


def test_the_registry_cannot_be_changed() -> None:
    with pytest.raises(TypeError):
        REGISTRY.aliases["gemini"] = "chat_completions"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        REGISTRY.get("systemone").paths = ()  # type: ignore[misc]


def test_a_broken_table_is_refused_with_every_problem() -> None:
    table = (
        Api("a", ("/v1/x",), "llm"),
        Api("a", ("/v1/y",), "llm"),
        Api("b", ("/v1/x", "v1/z"), "decision", listener_schema="vllm-sr/5.0"),
    )
    with pytest.raises(ValueError) as err:
        ApiRegistry(table, {"a": "b", "c": "missing"})
    assert str(err.value) == (
        "invalid API registry: API 'a' is registered twice; path '/v1/x' belongs to two APIs; "
        "alias 'a' shadows a registered API; alias 'c' points at unknown API 'missing'; "
        "API 'b' needs absolute paths; API 'b' must default a schema on both sides or neither"
    )


def test_every_schema_an_api_names_is_registered() -> None:
    for api in REGISTRY:
        for schema_id in api.schemas:
            assert schema_id in schemas.SCHEMAS


def test_schema_and_deviation_lookups_list_what_is_supported() -> None:
    with pytest.raises(
        schemas.UnknownSchemaError,
        match=r"unknown schema 'x/1.0' \(supported: systemone/0.2, vllm-sr/4.0, vllm-sr/5.0\)",
    ):
        schemas.schema("x/1.0")
    with pytest.raises(schemas.UnknownSchemaError, match=r"unknown deviation 'y' \(supported: state_text\)"):
        schemas.deviation("y")
    assert schemas.deviation("state_text").applies_to == {"systemone/0.2", "vllm-sr/5.0"}
    assert schemas.LISTENER_SCHEMAS == ("vllm-sr/5.0", "vllm-sr/4.0")
    assert schemas.UPSTREAM_SCHEMAS == ("systemone/0.2", "vllm-sr/5.0")
