"""The codec registry: immutable, checked at start, and lookups that name what is supported."""

from __future__ import annotations

from dataclasses import replace

import pytest

from systemone import REGISTRY
from systemone.client import CLIENTS
from systemone.deviations import DEVIATIONS
from systemone.listener import LISTENERS
from systemone.registry import build, check
from systemone.schemas import UnknownSchemaError


def test_registry_holds_every_listener_and_upstream_schema() -> None:
    assert sorted(REGISTRY.listeners) == ["systemone/0.2", "vllm-sr/4.0", "vllm-sr/5.0"]
    assert sorted(REGISTRY.clients) == ["systemone/0.2", "vllm-sr/5.0"]
    assert all(c.stateless and len(c.spec[1]) == 64 for c in REGISTRY.clients.values())


def test_registry_cannot_be_changed() -> None:
    with pytest.raises(TypeError):
        REGISTRY.listeners["x"] = LISTENERS["vllm-sr/5.0"]  # type: ignore[index]


def test_unknown_ids_list_the_supported_ones() -> None:
    with pytest.raises(
        UnknownSchemaError, match=r"unknown upstream schema 'vllm-sr/4\.0' \(supported: systemone/0\.2, vllm-sr/5\.0\)"
    ):
        REGISTRY.client("vllm-sr/4.0")
    with pytest.raises(UnknownSchemaError, match="supported: state_text"):
        REGISTRY.deviation("gzip")


def test_a_bad_table_is_refused_with_every_problem_at_once() -> None:
    clients = {**CLIENTS, "vllm-sr/5.0": replace(CLIENTS["vllm-sr/5.0"], stateless=False, spec=("x.yaml", ""))}
    deviations = {"state_text": replace(DEVIATIONS["state_text"], applies_to=frozenset({"vllm-sr/4.0"}))}
    problems = check(LISTENERS, clients, deviations)
    assert "client codec 'vllm-sr/5.0' is not stateless" in problems
    assert "client codec 'vllm-sr/5.0': spec x.yaml has no sha256" in problems
    assert "deviation 'state_text' applies to no registered client schema" in problems
    with pytest.raises(RuntimeError, match="invalid codec registry"):
        build(LISTENERS, clients, deviations)
