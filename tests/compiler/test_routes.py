"""What each path of a listener does once compiled: which APIs are routed, which answer 404."""

from __future__ import annotations

import pytest

from sr_control.compiler import Resources
from tests.compiler.compiled import compile_text, local_reply, route_for, sidecar_data, sidecar_metadata

CONFIG = """
version: 2
providers:
  models:
    - {name: solo, api_format: chat_completions, endpoints: ["http://10.1.0.1:8000/v1"]}
    - {name: other, api_format: chat_completions, endpoints: ["http://10.1.0.2:8000/openai/v1"]}
    - {name: keyed, api_format: messages, endpoints: ["https://llm.example.com/v1"], api_key_env: KEY}
deployments:
  d3-a: {provider: systemone, endpoint: "http://10.2.0.1:8100/v1/systemone", model: d3, schema: vllm-sr/5.0}
listeners:
  - name: public
    port: 8801
    apis:
      systemone: {schema: vllm-sr/4.0, max_deadline_ms: 2500}
      chat_completions: {models: [solo]}
  - name: chat
    port: 8802
    apis:
      openai: {models: [solo, other]}
      messages: {models: [keyed]}
  - name: rewrite
    port: 8803
    apis:
      chat_completions: {models: [other]}
  - name: empty
    port: 8804
    apis:
      responses: {models: []}
"""


@pytest.fixture(scope="module")
def resources() -> Resources:
    return compile_text(CONFIG)


@pytest.mark.parametrize("path", ["/v1/systemone", "/v1/systemone/batch", "/v1/decisions"])
def test_system_one_paths_go_through_the_sidecar_with_the_listener_schema(resources: Resources, path: str) -> None:
    route = route_for(resources, "public", path)
    metadata = sidecar_metadata(route)
    assert metadata is not None
    assert metadata["x-vsr-listener"] == "public"
    assert metadata["x-vsr-api"] == "systemone"
    assert metadata["x-vsr-schema"] == "vllm-sr/4.0"
    assert route["route"]["cluster_header"] == "x-vsr-cluster"
    assert route["route"]["timeout"] == "4.500s"  # the 2.5 s deadline and the margin: the sidecar answers first


@pytest.mark.parametrize(
    ("listener", "path", "api"),
    [
        ("public", "/v1/messages", "messages"),
        ("public", "/v1/responses", "responses"),
        ("public", "/v1/images/generations", "images"),
        ("chat", "/v1/systemone", "systemone"),
        ("chat", "/v1/decisions", "systemone"),
    ],
)
def test_a_path_of_an_api_not_offered_answers_404_naming_the_api_and_the_listener(
    resources: Resources, listener: str, path: str, api: str
) -> None:
    route = route_for(resources, listener, path)
    status, body = local_reply(route)
    assert status == 404
    assert api in body["detail"]["message"]
    assert repr(listener) in body["detail"]["message"]
    assert sidecar_metadata(route) is None  # Envoy answers; Python never sees it


def test_an_unknown_path_answers_404_naming_the_listener(resources: Resources) -> None:
    route = route_for(resources, "chat", "/admin")
    status, body = local_reply(route)
    assert status == 404
    assert "'chat'" in body["detail"]["message"]
    assert sidecar_metadata(route) is None


def test_a_4_0_listener_errors_carry_the_4_0_error_object_too(resources: Resources) -> None:
    _, legacy = local_reply(route_for(resources, "public", "/v1/messages"))
    _, current = local_reply(route_for(resources, "chat", "/v1/systemone"))
    assert legacy["error"]["message"] == legacy["detail"]["message"]
    assert "error" not in current


def test_one_keyless_model_is_routed_straight_to_its_provider(resources: Resources) -> None:
    route = route_for(resources, "public", "/v1/chat/completions")
    assert sidecar_metadata(route) is None
    assert route["route"]["cluster"] == "provider/solo"
    assert "prefix_rewrite" not in route["route"]  # the endpoint's /v1 is the client's /v1


def test_a_provider_under_another_base_path_gets_the_path_rewritten(resources: Resources) -> None:
    route = route_for(resources, "rewrite", "/v1/chat/completions")
    assert route["route"]["prefix_rewrite"] == "/openai/v1/chat/completions"


def test_several_models_go_through_the_sidecar_which_reads_the_model(resources: Resources) -> None:
    route = route_for(resources, "chat", "/v1/chat/completions")
    metadata = sidecar_metadata(route)
    assert metadata is not None and metadata["x-vsr-api"] == "chat_completions"
    assert "x-vsr-schema" not in metadata
    mode = route["typed_per_filter_config"]["envoy.filters.http.ext_proc"]["config"]["overrides"]["processing_mode"]
    # LLM answers stream back untouched (NONE is the enum's zero, so proto JSON leaves it out).
    assert mode["response_header_mode"] == "SKIP"
    assert mode.get("response_body_mode", "NONE") == "NONE"
    assert mode["request_body_mode"] == "BUFFERED"


def test_a_model_with_an_api_key_goes_through_the_sidecar(resources: Resources) -> None:
    # The key is the sidecar's to add; it is never written into Envoy config.
    assert sidecar_metadata(route_for(resources, "chat", "/v1/messages")) is not None


def test_an_offered_api_without_models_answers_404(resources: Resources) -> None:
    status, body = local_reply(route_for(resources, "empty", "/v1/responses"))
    assert status == 404
    assert "no model serves it" in body["detail"]["message"]


def test_models_listing_is_get_only_and_goes_to_the_sidecar(resources: Resources) -> None:
    get = route_for(resources, "chat", "/v1/models", "GET")
    assert sidecar_metadata(get) is not None and sidecar_metadata(get)["x-vsr-api"] == "models"  # type: ignore[index]
    status, body = local_reply(route_for(resources, "chat", "/v1/models", "POST"))
    assert status == 405
    assert "GET" in body["detail"]["message"]


def test_every_sidecar_route_names_the_version_of_its_listener_data(resources: Resources) -> None:
    for listener in ("public", "chat"):
        version = resources.named("type.googleapis.com/xds.type.v3.TypedStruct")[f"sidecar/{listener}"].version
        route = route_for(resources, listener, "/v1/models", "GET")
        assert sidecar_metadata(route)["x-vsr-config-version"] == version  # type: ignore[index]


def test_sidecar_data_holds_the_listener_apis_and_what_their_models_reach(resources: Resources) -> None:
    data = sidecar_data(resources, "public")
    assert data["listener"] == "public"
    systemone = next(a for a in data["apis"] if a["api"] == "systemone")
    assert systemone["schema"] == "vllm-sr/4.0"
    assert systemone["max_deadline_ms"] == 2500
    assert data["models"]["d3"] == {"deployments": ["d3-a"]}
    assert data["deployments"]["d3-a"]["cluster"] == "deployment/d3-a"
    assert data["deployments"]["d3-a"]["path"] == "/v1/systemone"
    assert data["providers"]["solo"]["cluster"] == "provider/solo"


def test_client_sent_routing_headers_are_dropped_on_arrival(resources: Resources) -> None:
    from tests.compiler.compiled import route_config

    assert route_config(resources, "public")["internal_only_headers"] == ["x-vsr-cluster"]


def test_a_request_the_sidecar_named_a_cluster_for_takes_the_forward_route_whatever_its_path(
    resources: Resources,
) -> None:
    for listener, path in (("public", "/v1/decisions"), ("chat", "/openai/v1/chat/completions"), ("chat", "/anything")):
        route = route_for(resources, listener, path, headers=frozenset({"x-vsr-cluster"}))
        assert route["name"] == "forward"
        assert route["route"]["cluster_header"] == "x-vsr-cluster" and route["route"]["auto_host_rewrite"] is True
        assert route["request_headers_to_remove"] == ["x-vsr-cluster"]  # upstreams never see it
        assert route["route"]["retry_policy"]["retry_on"] == "connect-failure,refused-stream,reset"
    # A client's request never carries the header (dropped on arrival), so it matches by path.
    assert route_for(resources, "public", "/v1/decisions")["name"] == "systemone:/v1/decisions"


def test_system_one_models_are_listed_where_system_one_is_offered(resources: Resources) -> None:
    get = route_for(resources, "public", "/v1/systemone/models", "GET")
    assert sidecar_metadata(get) == {
        "x-vsr-listener": "public",
        "x-vsr-api": "models",
        "x-vsr-schema": "vllm-sr/4.0",
        "x-vsr-config-version": sidecar_metadata(get)["x-vsr-config-version"],
    }  # type: ignore[index]
    assert local_reply(route_for(resources, "public", "/v1/systemone/models", "POST"))[0] == 405
    status, body = local_reply(route_for(resources, "chat", "/v1/systemone/models", "GET"))
    assert status == 404  # chat offers no System One


def test_every_answer_carries_the_request_id_as_the_sdk_reads_it(resources: Resources) -> None:
    for listener, path in (("public", "/v1/systemone"), ("public", "/v1/chat/completions"), ("chat", "/v1/models")):
        headers = {
            h["header"]["key"]: h["header"]["value"]
            for h in route_for(resources, listener, path, "GET" if path.endswith("models") else "POST")[
                "response_headers_to_add"
            ]
        }
        assert headers["x-typesafe-request-id"] == "%REQ(x-request-id)%"


KEYED = """
version: 2
providers:
  models:
    - {name: solo, api_format: chat_completions, endpoints: ["http://10.1.0.1:8000/v1"]}
listeners:
  - name: keyed
    port: 8801
    auth: {keys_env: LISTENER_KEYS}
    apis:
      chat_completions: {models: [solo]}
"""


def test_a_listener_with_keys_sends_even_a_lone_keyless_model_through_the_sidecar() -> None:
    resources = compile_text(KEYED)
    route = route_for(resources, "keyed", "/v1/chat/completions")
    assert sidecar_metadata(route) is not None and "cluster" not in route["route"]
    data = sidecar_data(resources, "keyed")
    assert data["auth"] == {"keys_env": "LISTENER_KEYS"}  # where the keys are, never the keys


def test_the_listener_logs_json_and_lets_the_sidecar_set_envoys_own_headers() -> None:
    from tests.compiler.compiled import listener

    hcm = listener(compile_text(KEYED), "keyed")["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["always_set_request_id_in_response"] is True
    log, outcomes = hcm["access_log"]
    assert log["typed_config"]["log_format"]["json_format"]["request_id"] == "%REQ(X-REQUEST-ID)%"
    # Every response also goes to the sidecar, which counts them (vsr_listener_responses_total).
    assert outcomes["typed_config"]["common_config"] == {
        "log_name": "keyed",
        "transport_api_version": "V3",
        "grpc_service": {"envoy_grpc": {"cluster_name": "vsr/sidecar"}},
    }
    ext_proc = next(f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.ext_proc")
    assert ext_proc["typed_config"]["mutation_rules"] == {"allow_envoy": True}
