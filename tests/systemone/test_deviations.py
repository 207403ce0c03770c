"""The state_text deviation, and what every model family reads from it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systemone import REGISTRY, Target
from systemone.deviations import state_text
from systemone.families import model_state, reads_both
from systemone.generated.runtime_fields import FAMILIES
from systemone.jsontext import loads
from tests.systemone.inputs import json_texts_with_literals, json_values

V50L = REGISTRY.listener("vllm-sr/5.0")


def test_state_text_golden_on_a_0_2_call() -> None:
    body = (
        '{"state": {"request": "Où est ma commande ?", "n": 1e3, "z": -0, "list": [1.0]}, "questions": {"q": '
        '{"type": "noul"}}}'
    ).encode()
    req = V50L.read("/v1/systemone", body)
    plan = REGISTRY.client("systemone/0.2").plan(req.ir, Target(model="d3", deviations=("state_text",)))
    assert (
        plan.calls[0].body
        == (
            '{"model": "d3", "state": "{\\"request\\": \\"Où est ma commande ?\\", \\"n\\": 1000.0, \\"z\\": '
            '0, \\"list\\": [1.0]}", "questions": {"q": {"type": "noul"}}}'
        ).encode()
    )
    assert plan.diagnostics == ("state_text: sent the state of the request as JSON text",)


def test_state_text_leaves_a_text_state_alone_and_applies_to_each_request_of_a_5_0_batch() -> None:
    assert state_text("already text") == "already text"
    batch = {
        "requests": {
            "a": {"state": "plain", "questions": {"q": {"type": "noul"}}},
            "b": {"state": ["x", 2], "questions": {"q": {"type": "noul"}}},
        }
    }
    req = V50L.read("/v1/systemone/batch", json.dumps(batch).encode())
    (call,) = REGISTRY.client("vllm-sr/5.0").plan(req.ir, Target("vllm-sr/5.0", deviations=("state_text",))).calls
    doc = json.loads(call.body)
    assert doc["requests"]["a"]["state"] == "plain" and doc["requests"]["b"]["state"] == '["x", 2]'


def test_state_text_is_declared_for_both_upstream_schemas() -> None:
    dev = REGISTRY.deviation("state_text")
    assert dev.applies("systemone/0.2") and dev.applies("vllm-sr/5.0") and not dev.applies("vllm-sr/4.0")


@settings(max_examples=200, deadline=None)
@given(json_texts_with_literals())
def test_fuzz_state_text_is_exactly_json_dumps_of_the_state_python_reads(text: str) -> None:
    assert state_text(loads(text)) == json.dumps(json.loads(text), ensure_ascii=False)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=60, deadline=None)
@given(
    state=json_values(15).filter(lambda v: isinstance(v, (dict, list)))
    | st.just({"request": "hi", "history": "earlier", "n": 1e3})
)
def test_every_family_reads_an_object_state_and_its_state_text_alike(family: str, state: object) -> None:
    assert reads_both(family)
    read = loads(json.dumps(state, ensure_ascii=False))
    assert model_state(family, read) == model_state(family, state_text(read))
