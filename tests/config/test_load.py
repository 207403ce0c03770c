"""Loading router configs: what loads, and the exact words of every problem."""

from __future__ import annotations

import textwrap

import pytest

from sr_control.config import load as loader
from sr_control.config.errors import ConfigError
from tests.conftest import ROOT

SEED_SNIPPET = """\
deployments:
  gateway-d3:
    provider: systemone
    endpoint: https://gateway.example.com/v1/systemone
    model: d3
    schema: systemone/0.2 # 默认;vllm-sr serve 目标使用 vllm-sr/5.0
    deviations: [state_text] # 只用于已声明并测试过的不一致
    max_concurrency: 8 # 默认:拆分后同时进行的调用数
"""


def test_seed_000_deployment_snippet_loads_as_written() -> None:
    config = loader.load_text("version: 2\n" + SEED_SNIPPET, "seed.yaml")
    d3 = config.deployments["gateway-d3"]
    assert (d3.provider, d3.endpoint, d3.model) == ("systemone", "https://gateway.example.com/v1/systemone", "d3")
    assert (d3.schema_, d3.deviations, d3.max_concurrency) == ("systemone/0.2", ["state_text"], 8)


def test_deployment_defaults_follow_the_seed() -> None:
    config = loader.load_text(
        "version: 2\ndeployments:\n  d:\n    provider: systemone\n"
        "    endpoint: http://127.0.0.1:8100/v1/systemone\n    model: m\n"
    )
    d = config.deployments["d"]
    assert (d.schema_, d.deviations, d.max_concurrency, d.capabilities) == ("systemone/0.2", [], 8, None)


def test_the_example_config_is_valid() -> None:
    config = loader.load(ROOT / "examples" / "router.yaml")
    assert [listener.name for listener in config.listeners] == ["public", "internal"]
    assert config.pools["vllm-sr/auto"].members == ["local-d3", "gateway-d3"]


def test_an_empty_file_is_a_valid_config_with_nothing_in_it() -> None:
    config = loader.load_text("version: 2\n")
    assert config.listeners == [] and config.deployments == {}


def test_a_section_left_empty_has_nothing_in_it() -> None:
    config = loader.load_text("version: 2\nproviders:\ndeployments:\npools:\nlisteners:\n")
    assert (config.providers.models, config.deployments, config.pools, config.listeners) == ([], {}, {}, [])


def test_a_name_over_253_characters_is_a_problem_at_the_name() -> None:
    name = "d" * 254
    report = loader.validate_text(f"version: 2\npools:\n  {name}: {{members: [x]}}\n", "c.yaml")
    assert [str(p) for p in report.errors] == [
        "c.yaml:3:3: error: pools." + name + ": names must be at most 253 characters (this one has 254)"
    ]


def _problems(text: str) -> list[str]:
    report = loader.validate_text(textwrap.dedent(text), "c.yaml")
    return [str(p) for p in report.problems]


PROVIDERS = """\
version: 2
providers:
  models:
    - name: gpt
      endpoints: [http://10.0.0.1:8000/v1]
deployments:
  gw:
    provider: systemone
    endpoint: https://gw.example/v1/systemone
    model: d3
"""

# (what goes wrong, the file's extra text after PROVIDERS, the exact line the user reads)
CASES = [
    (
        "unknown API",
        "listeners:\n  - {name: a, port: 1, apis: {grpc: {}}}\n",
        (
            "c.yaml:12:31: error: listeners[0].apis.grpc: unknown API 'grpc' (supported: chat_completions, "
            "responses, messages, images, systemone, openai, anthropic)"
        ),
    ),
    (
        "alias and name together",
        "listeners:\n  - name: a\n    port: 1\n    apis:\n      anthropic: {}\n      messages: {}\n",
        (
            "c.yaml:16:7: error: listeners[0].apis.messages: messages is given twice in this apis map (as "
            "'anthropic' and 'messages')"
        ),
    ),
    (
        "schema on an unversioned API",
        "listeners:\n  - {name: a, port: 1, apis: {responses: {schema: vllm-sr/5.0}}}\n",
        "c.yaml:12:51: error: listeners[0].apis.responses.schema: responses is unversioned and takes no schema",
    ),
    (
        "unknown listener schema",
        "listeners:\n  - {name: a, port: 1, apis: {systemone: {schema: vllm-sr/6.0}}}\n",
        (
            "c.yaml:12:51: error: listeners[0].apis.systemone.schema: unknown schema 'vllm-sr/6.0' (supported: "
            "vllm-sr/4.0, vllm-sr/5.0)"
        ),
    ),
    (
        "upstream-only schema on a listener",
        "listeners:\n  - {name: a, port: 1, apis: {systemone: {schema: systemone/0.2}}}\n",
        (
            "c.yaml:12:51: error: listeners[0].apis.systemone.schema: a listener cannot serve systemone in "
            "systemone/0.2 (listener schemas: vllm-sr/4.0, vllm-sr/5.0)"
        ),
    ),
    (
        "systemone setting on an LLM API",
        "listeners:\n  - {name: a, port: 1, apis: {openai: {max_deadline_ms: 10}}}\n",
        (
            "c.yaml:12:57: error: listeners[0].apis.openai.max_deadline_ms: max_deadline_ms is a systemone "
            "setting; chat_completions has none"
        ),
    ),
    (
        "unknown model",
        "listeners:\n  - {name: a, port: 1, apis: {systemone: {models: [d4]}}}\n",
        "c.yaml:12:52: error: listeners[0].apis.systemone.models[0]: unknown model 'd4' (decision models: d3)",
    ),
    (
        "model of the wrong kind",
        "listeners:\n  - {name: a, port: 1, apis: {chat_completions: {models: [d3]}}}\n",
        (
            "c.yaml:12:59: error: listeners[0].apis.chat_completions.models[0]: 'd3' is a decision model; "
            "chat_completions serves llm models"
        ),
    ),
    (
        "an LLM model asked of systemone",
        "listeners:\n  - {name: a, port: 1, apis: {systemone: {models: [gpt]}}}\n",
        (
            "c.yaml:12:52: error: listeners[0].apis.systemone.models[0]: 'gpt' is an LLM model; systemone serves "
            "decision models"
        ),
    ),
    (
        "an LLM model of another format",
        "listeners:\n  - {name: a, port: 1, apis: {messages: {models: [gpt]}}}\n",
        (
            "c.yaml:12:51: error: listeners[0].apis.messages.models[0]: 'gpt' speaks chat_completions, not "
            "messages; list it under chat_completions (the router does not translate between LLM formats)"
        ),
    ),
    (
        "listener keys from two places",
        "listeners:\n  - {name: a, port: 1, auth: {keys_env: K, keys_file: /k}}\n",
        "c.yaml:12:24: error: listeners[0].auth: give exactly one of keys_env and keys_file",
    ),
    (
        "listener keys inline",
        "listeners:\n  - {name: a, port: 1, auth: {keys: [sekrit]}}\n",
        "c.yaml:12:31: error: listeners[0].auth.keys: unknown field 'keys'",
    ),
    (
        "relative keys file",
        "listeners:\n  - {name: a, port: 1, auth: {keys_file: keys.txt}}\n",
        (
            "c.yaml:12:24: error: listeners[0].auth: keys_file 'keys.txt' must be an absolute path (the sidecar "
            "reads it, from its own working directory)"
        ),
    ),
    (
        "duplicate listener name",
        "listeners:\n  - {name: a, port: 1}\n  - {name: a, port: 2}\n",
        "c.yaml:13:12: error: listeners[1].name: listener name 'a' is used more than once",
    ),
    (
        "port taken on the same address",
        "listeners:\n  - {name: a, port: 1, address: 127.0.0.1}\n  - {name: b, port: 1, address: 0.0.0.0}\n",
        "c.yaml:13:21: error: listeners[1].port: port 1 on 0.0.0.0 is already taken by listeners[0]",
    ),
    (
        "bad listener name",
        "listeners:\n  - {name: Public, port: 1}\n",
        (
            "c.yaml:12:12: error: listeners[0].name: must be lowercase letters, digits, '-' or '_', starting and "
            "ending with a letter or digit (at most 63) (got 'Public')"
        ),
    ),
    (
        "host name as address",
        "listeners:\n  - {name: a, port: 1, address: localhost}\n",
        "c.yaml:12:33: error: listeners[0].address: 'localhost' is not an IP address",
    ),
    (
        "port out of range",
        "listeners:\n  - {name: a, port: 70000}\n",
        "c.yaml:12:21: error: listeners[0].port: must be less than or equal to 65535 (got 70000)",
    ),
    (
        "missing port",
        "listeners:\n  - {name: a}\n",
        "c.yaml:12:5: error: listeners[0].port: missing required field 'port'",
    ),
    (
        "unknown listener field",
        "listeners:\n  - {name: a, port: 1, models: [gpt]}\n",
        "c.yaml:12:24: error: listeners[0].models: unknown field 'models'",
    ),
    (
        "unknown section",
        "routes: []\n",
        (
            "c.yaml:11:1: error: routes: unknown section 'routes' (sections: version, providers, deployments, "
            "pools, listeners, signals, virtual_models, judges, tracing)"
        ),
    ),
    (
        "unknown pool member",
        "pools:\n  vllm-sr/auto: {members: [gw, lost]}\n",
        "c.yaml:12:32: error: pools[\"vllm-sr/auto\"].members[1]: unknown deployment 'lost' (deployments: gw)",
    ),
    (
        "empty pool",
        "pools:\n  vllm-sr/auto: {members: []}\n",
        'c.yaml:12:18: error: pools["vllm-sr/auto"].members: must not be empty',
    ),
    (
        "name used by a pool and a deployment's model",
        "pools:\n  d3: {members: [gw]}\n",
        (
            "c.yaml:10:12: error: deployments.gw.model: model name 'd3' is used by a deployment's model and a "
            "pool; give each a distinct name"
        ),
    ),
]

DEPLOYMENT = (
    "version: 2\ndeployments:\n  d:\n    provider: systemone\n    endpoint: https://gw.example/v1/systemone\n"
    "    model: d3\n"
)

# (what goes wrong, a line replacing or adding to DEPLOYMENT's fields, the exact line the user reads)
DEPLOYMENT_CASES = [
    (
        "unknown upstream schema",
        "    schema: systemone/0.3\n",
        (
            "c.yaml:7:13: error: deployments.d.schema: unknown schema 'systemone/0.3' (supported: systemone/0.2, "
            "vllm-sr/5.0)"
        ),
    ),
    (
        "listener-only schema on a deployment",
        "    schema: vllm-sr/4.0\n",
        (
            "c.yaml:7:13: error: deployments.d.schema: vllm-sr/4.0 is served to clients, not spoken to upstreams "
            "(upstream schemas: systemone/0.2, vllm-sr/5.0)"
        ),
    ),
    (
        "unknown deviation",
        "    deviations: [state_json]\n",
        "c.yaml:7:18: error: deployments.d.deviations[0]: unknown deviation 'state_json' (supported: state_text)",
    ),
    (
        "deviation listed twice",
        "    deviations: [state_text, state_text]\n",
        "c.yaml:7:30: error: deployments.d.deviations[1]: deviation 'state_text' is listed twice",
    ),
    (
        "max_concurrency zero",
        "    max_concurrency: 0\n",
        "c.yaml:7:22: error: deployments.d.max_concurrency: must be greater than or equal to 1 (got 0)",
    ),
    (
        "unknown provider",
        "    provider: openai\n",
        "c.yaml:4:15: error: deployments.d.provider: must be 'systemone' (got 'openai')",
    ),
    (
        "endpoint not a URL",
        "    endpoint: gateway.example.com\n",
        (
            "c.yaml:5:15: error: deployments.d.endpoint: 'gateway.example.com' is not an http:// or https:// URL "
            "with a host"
        ),
    ),
    (
        "unknown question type",
        "    capabilities: {question_types: [noul, yesno]}\n",
        (
            "c.yaml:7:43: error: deployments.d.capabilities.question_types[1]: must be 'noul', 'choice', "
            "'score', 'box', 'span', 'set' or 'track' (got 'yesno')"
        ),
    ),
    (
        "no question types",
        "    capabilities: {question_types: []}\n",
        "c.yaml:7:20: error: deployments.d.capabilities.question_types: must not be empty",
    ),
    ("missing model", None, "c.yaml:3:3: error: deployments.d.model: missing required field 'model'"),
]


def _deployment(extra: str | None) -> str:
    if extra is None:
        return DEPLOYMENT.replace("    model: d3\n", "")
    key = extra.split(":")[0]
    lines = [line for line in DEPLOYMENT.splitlines(keepends=True) if not line.startswith(key + ":")]
    if len(lines) < len(DEPLOYMENT.splitlines()):
        return DEPLOYMENT.replace(
            next(line for line in DEPLOYMENT.splitlines(keepends=True) if line.startswith(key + ":")), extra
        )
    return DEPLOYMENT + extra


@pytest.mark.parametrize("what,extra,expected", CASES, ids=[c[0] for c in CASES])
def test_each_problem_is_reported_in_the_users_words(what: str, extra: str, expected: str) -> None:
    assert expected in _problems(PROVIDERS + extra)


@pytest.mark.parametrize("what,extra,expected", DEPLOYMENT_CASES, ids=[c[0] for c in DEPLOYMENT_CASES])
def test_each_deployment_problem_is_reported_in_the_users_words(what: str, extra: str | None, expected: str) -> None:
    assert _problems(_deployment(extra)) == [expected]


def test_provider_model_problems() -> None:
    problems = _problems(
        """\
        version: 2
        providers:
          models:
            - {name: a, api_format: chat_completion, endpoints: [http://h/v1]}
            - {name: b, endpoints: [http://h/v1], schema: vllm-sr/5.0}
            - {name: c, api_format: systemone, endpoints: [http://h/v1], schema: vllm-sr/4.0}
            - {name: c, endpoints: []}
        """
    )
    assert problems == [
        (
            "c.yaml:4:29: error: providers.models[0].api_format: unknown API 'chat_completion' (supported: "
            "chat_completions, responses, messages, images, systemone, openai, anthropic)"
        ),
        (
            "c.yaml:5:51: error: providers.models[1].schema: chat_completions is unversioned; only systemone "
            "models take a schema"
        ),
        (
            "c.yaml:6:74: error: providers.models[2].schema: vllm-sr/4.0 is served to clients, not spoken to "
            "upstreams (upstream schemas: systemone/0.2, vllm-sr/5.0)"
        ),
        "c.yaml:7:17: error: providers.models[3].endpoints: must not be empty",
    ]


def test_every_problem_in_a_file_is_reported_at_once() -> None:
    problems = _problems(
        PROVIDERS
        + (
            "listeners:\n  - {name: a, port: 1, apis: {grpc: {}}}\n  - {name: B, port: 2}\n"
            "  - {name: c, port: 1, apis: {systemone: {models: [x]}}}\n"
        )
    )
    assert [p.split(": error: ")[1].split(":")[0] for p in problems] == [
        "listeners[0].apis.grpc",
        "listeners[1].name",
        "listeners[2].port",
        "listeners[2].apis.systemone.models[0]",
    ]


def test_a_broken_field_does_not_hide_other_problems_in_its_entry() -> None:
    problems = _problems(
        "version: 2\ndeployments:\n  d:\n    provider: systemone\n    endpoint: https://gw/v1\n    model: m\n"
        "    max_concurrency: -1\n    schema: vllm-sr/9.9\n"
    )
    assert len(problems) == 2 and "max_concurrency" in problems[0] and "vllm-sr/9.9" in problems[1]


def test_references_to_a_broken_entry_are_not_reported_twice() -> None:
    problems = _problems(
        "version: 2\ndeployments:\n  d:\n    provider: nope\n    endpoint: https://gw/v1\n    model: m\n"
        "pools:\n  vllm-sr/auto: {members: [d]}\nlisteners:\n  - {name: a, port: 1, apis: {systemone: {models: [m]}}}\n"
    )
    assert problems == ["c.yaml:4:15: error: deployments.d.provider: must be 'systemone' (got 'nope')"]


def test_yaml_syntax_errors_point_at_the_line() -> None:
    assert _problems("version: 2\nlisteners:\n  - name: a\n   port: 1\n") == [
        "c.yaml:4:4: error: invalid YAML: while parsing a block collection did not find expected '-' indicator"
    ]


def test_duplicate_keys_are_an_error_not_a_silent_override() -> None:
    assert _problems("version: 2\nlisteners: []\nversion: 2\n") == [
        "c.yaml:3:1: error: invalid YAML: duplicate key 'version' (first given on line 1)"
    ]


def test_scalars_read_as_yaml_1_2_not_1_1() -> None:
    """`no` and `on` are strings and `010` is ten, as ruamel.yaml (and `config migrate`) read them."""
    config = loader.load_text(
        "version: 2\nproviders:\n  models:\n    - {name: no, endpoints: [http://h/v1]}\n"
        "listeners:\n  - {name: on, port: 010, apis: {openai: {models: [no]}}}\n  - {name: hex, port: 0x1F91}\n"
    )
    assert config.providers.models[0].name == "no"
    assert (config.listeners[0].name, config.listeners[0].port, config.listeners[1].port) == ("on", 10, 8081)


def test_merge_keys_are_read() -> None:
    config = loader.load_text(
        "version: 2\ndeployments:\n  a: &base {provider: systemone, endpoint: http://h/v1/systemone, model: m}\n"
        "  b:\n    <<: *base\n    max_concurrency: 2\n"
    )
    assert (config.deployments["b"].model, config.deployments["b"].max_concurrency) == ("m", 2)


def test_a_file_that_is_not_a_mapping() -> None:
    assert _problems("- a\n- b\n") == [
        "c.yaml:1:1: error: a router config is a mapping of sections (version, providers, deployments, "
        "pools, listeners, signals, virtual_models, judges, tracing), not a list"
    ]


def test_a_newer_format_is_refused_with_a_clear_message() -> None:
    assert _problems("version: 3\n") == [
        "c.yaml:1:10: error: version: config format 3 is newer than this vllm-sr understands (formats 1 to "
        "2); upgrade vllm-sr"
    ]


def test_a_version_that_is_not_a_number() -> None:
    assert _problems("version: two\n") == [
        "c.yaml:1:10: error: version: version must be a whole number from 1 to 2, not 'two'"
    ]


def test_an_old_format_loads_with_a_warning_that_says_how_to_migrate() -> None:
    report = loader.validate_text("listeners:\n  - {name: a, port: 1, systemone: true}\n", "old.yaml")
    assert report.valid
    assert [str(p) for p in report.problems] == [
        "old.yaml:1:1: warning: config format 1 is out of date; read as format 2. Run `vllm-sr config "
        "migrate --in-place old.yaml` to update the file"
    ]
    assert [a for a in report.config.listeners[0].apis] == [
        "chat_completions",
        "responses",
        "messages",
        "images",
        "systemone",
    ]


def test_load_raises_one_error_holding_every_problem(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.yaml"
    path.write_text("version: 2\nlisteners:\n  - {name: a}\n  - {name: b, port: 0}\n")
    with pytest.raises(ConfigError) as err:
        loader.load(path)
    assert [p.path for p in err.value.problems] == ["listeners[0].port", "listeners[1].port"]


def test_unreadable_files_are_told_apart_from_invalid_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(loader.ConfigUnreadable, match="no such file"):
        loader.load(tmp_path / "missing.yaml")
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(loader.ConfigUnreadable, match="not UTF-8"):
        loader.load(tmp_path / "latin1.yaml")
