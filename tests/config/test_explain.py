"""`config explain`: what each listener serves, resolved from the rules of seed 000."""

from __future__ import annotations

from sr_control.config import load as loader
from sr_control.config.explain import explain
from tests.conftest import ROOT

SYSTEMONE_PATHS = ["/v1/systemone", "/v1/systemone/batch", "/v1/decisions"]


def test_the_example_config_explained() -> None:
    explained = explain(loader.load(ROOT / "examples" / "router.yaml"))
    assert explained == {
        "version": 2,
        "listeners": [
            {
                "name": "public",
                "address": "0.0.0.0",
                "port": 8801,
                "apis": [
                    {
                        "api": "systemone",
                        "paths": SYSTEMONE_PATHS,
                        "schema": "vllm-sr/4.0",
                        "models": ["vllm-sr/auto", "d3"],
                        "settings": {"max_deadline_ms": 3000},
                    },
                    {
                        "api": "chat_completions",
                        "paths": ["/v1/chat/completions"],
                        "schema": None,
                        "models": ["gpt-oss-120b"],
                        "settings": {},
                    },
                ],
            },
            {
                "name": "internal",
                "address": "127.0.0.1",
                "port": 8802,
                "apis": [
                    {
                        "api": "chat_completions",
                        "paths": ["/v1/chat/completions"],
                        "schema": None,
                        "models": ["gpt-oss-120b"],
                        "settings": {},
                    },
                    # gpt-oss-120b speaks chat_completions; the router does not translate formats.
                    {"api": "responses", "paths": ["/v1/responses"], "schema": None, "models": [], "settings": {}},
                    {"api": "messages", "paths": ["/v1/messages"], "schema": None, "models": [], "settings": {}},
                    {"api": "images", "paths": ["/v1/images/*"], "schema": None, "models": [], "settings": {}},
                ],
            },
        ],
    }


CONFIG = """\
version: 2
providers:
  models:
    - {name: gpt, api_format: openai, endpoints: [http://h/v1]}
    - {name: claude, api_format: anthropic, endpoints: [http://h/v1]}
    - {name: vela, api_format: systemone, endpoints: [http://h/v1/systemone], schema: vllm-sr/5.0}
deployments:
  gw: {provider: systemone, endpoint: https://gw/v1/systemone, model: d3}
  gw2: {provider: systemone, endpoint: https://gw2/v1/systemone, model: d3}
pools:
  vllm-sr/auto: {members: [gw, gw2]}
listeners:
  - name: aliases
    port: 1
    apis:
      anthropic: {}
      openai: {models: [gpt]}
      systemone: {}
"""


def test_aliases_become_canonical_names_and_omitted_models_mean_those_of_the_apis_format() -> None:
    (listener,) = explain(loader.load_text(CONFIG))["listeners"]
    apis = {a["api"]: a for a in listener["apis"]}
    assert list(apis) == ["messages", "chat_completions", "systemone"]
    assert apis["messages"]["models"] == ["claude"]
    assert apis["chat_completions"]["models"] == ["gpt"]
    # Deployments sharing a model name serve it together: it is listed once.
    assert apis["systemone"]["models"] == ["vela", "d3", "vllm-sr/auto"]


def test_systemone_defaults_to_the_5_0_schema_on_a_listener() -> None:
    (listener,) = explain(loader.load_text(CONFIG))["listeners"]
    assert [a["schema"] for a in listener["apis"]] == [None, None, "vllm-sr/5.0"]


def test_a_listener_without_apis_serves_the_four_llm_apis_and_not_systemone() -> None:
    config = loader.load_text(CONFIG.split("listeners:")[0] + "listeners:\n  - {name: plain, port: 2}\n")
    (listener,) = explain(config)["listeners"]
    assert [a["api"] for a in listener["apis"]] == ["chat_completions", "responses", "messages", "images"]
    assert [a["models"] for a in listener["apis"]] == [["gpt"], [], ["claude"], []]
