"""What the control plane hands the sidecar for the Decide path (``sidecar/<listener>``), read as
the sidecar reads it: examples/decide.yaml compiled, its payload through the protobuf Struct."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format

from sr_control.compiler.protos import SIDECAR
from sr_control.extproc.data import ListenerData
from tests.compiler.compiled import compile_text, route_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "decide.yaml"


def data_of(text: str) -> ListenerData:
    resource = compile_text(text).named(SIDECAR)["sidecar/public"]
    return ListenerData.of(json_format.MessageToDict(resource.message.value), resource.version)


def test_the_sidecar_gets_the_virtual_models_and_everything_they_reach() -> None:
    data = data_of(EXAMPLE.read_text())
    plan = data.virtual_models["vllm-sr/router"]
    assert [route.name for _, route in plan.routes] == ["private", "urgent", "billing"]
    assert plan.default == "small-llm"
    assert list(plan.signals) == ["pii", "urgency", "team", "refund_words"]
    assert list(plan.judge_signals) == ["weak_answer"]
    assert plan.signals["urgency"].timeout_ms == 300
    # private-llm is a route's target the listener does not name: the sidecar still reaches it.
    assert set(data.providers) == {"small-llm", "big-llm", "private-llm"}
    assert data.providers["private-llm"].endpoints == ("http://127.0.0.1:9003/v1",)
    assert data.models["vllm-sr/auto"] == ("local-d3",)
    assert data.members["local-d3"].model == "d3-turbo"


def test_a_listener_without_virtual_models_carries_no_decide_data() -> None:
    text = EXAMPLE.read_text().replace("models: [vllm-sr/router, small-llm, big-llm]", "models: [small-llm, big-llm]")
    data = data_of(text)
    assert dict(data.virtual_models) == {}
    assert set(data.providers) == {"small-llm", "big-llm"}


def test_only_an_api_offering_a_judge_sends_the_answers_headers_to_the_sidecar() -> None:
    """Without a judge the answer's x-vsr-* headers come from the decision's dynamic metadata:
    the answer never goes to the sidecar."""

    def modes(text: str) -> list[str]:
        routes = route_config(compile_text(text), "public")["virtual_hosts"][0]["routes"]
        found = []
        for route in routes:
            per_route = route.get("typed_per_filter_config", {}).get("envoy.filters.http.ext_proc", {})
            mode = per_route.get("config", {}).get("overrides", {}).get("processing_mode")
            if route["match"].get("path") == "/v1/chat/completions" and mode:
                found.append(mode.get("response_header_mode", "DEFAULT"))
        return found

    assert modes(EXAMPLE.read_text()) == ["SEND"]
    unjudged = EXAMPLE.read_text().replace("        judge: weak\n", "")
    assert modes(unjudged) == ["SKIP"]
    plain = EXAMPLE.read_text().replace("models: [vllm-sr/router, small-llm, big-llm]", "models: [small-llm, big-llm]")
    assert modes(plain) == ["SKIP"]
