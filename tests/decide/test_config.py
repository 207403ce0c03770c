"""The Decide sections of a config: every problem at its file:line:col, one line each, through
``vllm-sr config validate`` as a user runs it; and every signal against its model's card."""

from __future__ import annotations

from pathlib import Path

import pytest

from sr_control.card import Card, Limits
from sr_control.config.load import load_text, validate_text
from sr_control.decide.cards import card_problems
from tests.conftest import run_cli

HEAD = """\
version: 2
providers:
  models:
    - {name: small-llm, api_format: chat_completions, endpoints: ["http://127.0.0.1:9001/v1"]}
    - {name: claude, api_format: messages, endpoints: ["http://127.0.0.1:9002/v1"]}
deployments:
  local: {provider: systemone, endpoint: "http://127.0.0.1:8100/v1/systemone", model: d3, schema: vllm-sr/5.0}
  gateway:
    provider: systemone
    endpoint: https://gw.example.com/v1/systemone
    model: gw-d3
    capabilities: {question_types: [noul, choice, score]}
pools:
  vllm-sr/auto: {members: [local]}
"""  # 14 lines: the cases' text starts on line 15


def problems(text: str) -> list[str]:
    return [str(p) for p in validate_text(HEAD + text, "c.yaml").problems]


CASES = [
    (
        "a type the signal does not have",
        "signals:\n  s: {type: maybe, instructions: x}\n",
        "c.yaml:16:13: error: signals.s.type: must be 'noul', 'choice', 'score', 'set' or 'span' (got 'maybe')",
    ),
    (
        "a choice signal with one option",
        "signals:\n  s: {type: choice, instructions: x, criteria: {a: null}}\n",
        "c.yaml:16:3: error: signals.s: a choice signal needs at least 2 options",
    ),
    (
        "a keyword signal that asks a model",
        "signals:\n  s: {keyword: refund, model: vllm-sr/auto}\n",
        "c.yaml:16:3: error: signals.s: a keyword signal asks no model; drop model",
    ),
    (
        "a broken regular expression",
        "signals:\n  s: {keyword: '(refund'}\n",
        "c.yaml:16:3: error: signals.s: keyword '(refund' is not a regular expression: missing ), unterminated "
        "subpattern at position 0",
    ),
    (
        "an input part outside seed 000's set",
        "signals:\n  s: {type: noul, instructions: x, input: [request, reply]}\n",
        "c.yaml:16:53: error: signals.s.input[1]: must be 'request', 'history', 'previous_turns', 'previous_answer', "
        "'tool_results', 'candidate', 'answer', 'context', 'image' or 'video' (got 'reply')",
    ),
    (
        "an unknown preset",
        "signals:\n  s: {preset: sarcasm}\n",
        "c.yaml:16:15: error: signals.s.preset: unknown preset 'sarcasm' (presets: halu, jailbreak, pii, toxicity, "
        "urgency)",
    ),
    (
        "criteria of another shape than the preset's",
        "signals:\n  s: {preset: pii, criteria: [person, email]}\n",
        "c.yaml:16:20: error: signals.s.criteria: a span signal's criteria map each label to its description "
        "(preset 'pii' asks a span question)",
    ),
    (
        "an unknown decision model",
        "signals:\n  s: {type: noul, instructions: x, model: d4}\n",
        "c.yaml:16:43: error: signals.s.model: unknown decision model 'd4' (decision models: d3, gw-d3, vllm-sr/auto)",
    ),
    (
        "a default answer that is no option",
        "signals:\n  s: {type: choice, instructions: x, criteria: {a: null, b: null}, on_unknown: c}\n",
        "c.yaml:16:80: error: signals.s.on_unknown: on_unknown 'c' is not an option of 's' (a, b)",
    ),
    (
        "a condition of two tests",
        "signals:\n  u: {type: noul, instructions: x}\nvirtual_models:\n  vm:\n    routes:\n"
        "      - {name: r, model: small-llm, when: {noul: u, score: u}}\n",
        "c.yaml:20:37: error: virtual_models.vm.routes[0].when: a condition is exactly one of noul, score, choice, "
        "set, span, keyword, all, any and not (it gives noul, score)",
    ),
    (
        "a test of the wrong kind",
        "signals:\n  u: {type: noul, instructions: x}\nvirtual_models:\n  vm:\n    routes:\n"
        "      - {name: r, model: small-llm, when: {score: u, at_least: 1}}\n",
        "c.yaml:20:51: error: virtual_models.vm.routes[0].when.score: signal 'u' is a noul signal; test it with "
        "noul:, not score:",
    ),
    (
        "a threshold past the top level",
        "signals:\n  u: {preset: urgency}\nvirtual_models:\n  vm:\n    routes:\n"
        "      - {name: r, model: small-llm, when: {score: u, at_least: 4}}\n",
        "c.yaml:20:64: error: virtual_models.vm.routes[0].when.at_least: at_least 4 is outside the answer of 'u': "
        "a level, 0 to 3 (its 4 levels)",
    ),
    (
        "an unknown signal deep in a condition",
        "virtual_models:\n  vm:\n    routes:\n      - {name: r, model: small-llm, when: {all: [{not: {span: pii}}]}}\n",
        "c.yaml:18:63: error: virtual_models.vm.routes[0].when.all[0].not.span: unknown signal 'pii' (signals: none "
        "defined)",
    ),
    (
        "a route that reads the answer",
        "signals:\n  weak: {type: noul, instructions: x, input: [answer]}\nvirtual_models:\n  vm:\n    routes:\n"
        "      - {name: r, model: small-llm, when: {noul: weak}}\n",
        "c.yaml:20:50: error: virtual_models.vm.routes[0].when.noul: signal 'weak' reads the LLM's answer, "
        "which a route cannot know yet; test it in a judge",
    ),
    (
        "an unknown LLM model",
        "virtual_models:\n  vm:\n    routes:\n      - {name: r, model: [small-llm, large-llm]}\n",
        "c.yaml:18:38: error: virtual_models.vm.routes[0].model[1]: unknown LLM model 'large-llm' (LLM models: "
        "small-llm, claude)",
    ),
    (
        "a decision model as a route's target",
        "virtual_models:\n  vm:\n    routes:\n      - {name: r, model: vllm-sr/auto}\n",
        "c.yaml:18:26: error: virtual_models.vm.routes[0].model: 'vllm-sr/auto' is a decision model; "
        "a route names the LLM models it sends to",
    ),
    (
        "models of two APIs",
        "virtual_models:\n  vm:\n    default: claude\n    routes:\n      - {name: r, model: small-llm}\n",
        "c.yaml:16:3: error: virtual_models.vm: 'vm' routes to models of several APIs: small-llm (chat_completions), "
        "claude (messages); the router does not translate between LLM formats",
    ),
    (
        "a virtual model named as a pool",
        "virtual_models:\n  vllm-sr/auto:\n    routes:\n      - {name: r, model: small-llm}\n",
        "c.yaml:16:3: error: virtual_models[\"vllm-sr/auto\"]: model name 'vllm-sr/auto' is already a provider model, "
        "a pool or a deployment's model",
    ),
    (
        "a header the router owns",
        "virtual_models:\n  vm:\n    routes:\n      - {name: r, model: small-llm, rewrite: {headers: {x-vsr-model: "
        "x}}}\n",
        "c.yaml:18:70: error: virtual_models.vm.routes[0].rewrite.headers.x-vsr-model: "
        "'x-vsr-model' is the router's or Envoy's to set; a rewrite cannot set it",
    ),
    (
        "a judge that tests no answer",
        "signals:\n  u: {type: noul, instructions: x}\njudges:\n  j: {when: {noul: u}}\n",
        "c.yaml:18:7: error: judges.j.when: judge 'j' tests no signal that reads the answer (input: [answer])",
    ),
]


@pytest.mark.parametrize(("text", "line"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_problem_is_one_line_at_its_place(text: str, line: str) -> None:
    assert problems(text) == [line]


def test_a_signal_a_declared_card_cannot_answer_is_refused_by_config_validate(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        HEAD
        + "signals:\n  pii: {preset: pii, model: gw-d3}\n"
        + "  topics: {type: set, instructions: x, criteria: {a: null}, model: gw-d3}\n"
    )
    result = run_cli("config", "validate", str(path))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{path}:16:3: error: signals.pii: signal 'pii' cannot be asked of 'gw-d3': deployment 'gateway' lacks span "
        "questions and the pii preset (a span preset is answered only by a model that lists it)",
        f"{path}:17:3: error: signals.topics: signal 'topics' cannot be asked of 'gw-d3': deployment 'gateway' lacks "
        f"set questions",
        f"{path}: 2 errors",
    ]


CARDS_CONFIG = (
    HEAD.replace("members: [local]", "members: [local, gateway]")
    + """\
signals:
  pii: {preset: pii}
  team: {type: choice, instructions: x, criteria: {a: null, b: null, c: null}}
  photo: {type: noul, instructions: x, input: [request, image]}
  urgency: {preset: urgency}
virtual_models:
  vm:
    routes:
      - {name: private, model: small-llm, when: {span: pii}}
      - {name: team, model: small-llm, when: {choice: team, is: a}}
"""
)


def test_cards_from_the_runtime_are_checked_by_the_same_function() -> None:
    """What the sidecar will do when a member's card arrives: pool members are judged together."""
    config = load_text(CARDS_CONFIG)
    gateway = Card(frozenset({"noul", "choice", "score"}))
    assert card_problems(config, {"local": None, "gateway": gateway}) == []  # local's card not known yet
    local = Card(
        frozenset({"noul", "choice", "score", "span"}), limits=Limits(max_options=2, min_levels=2, max_levels=3)
    )
    assert [line for _, line in card_problems(config, {"local": local, "gateway": gateway})] == [
        "signal 'pii' cannot be asked of 'vllm-sr/auto': deployment 'local' lacks the pii preset (a span preset is "
        "answered only by a model that lists it) and 5 labels (it reads at most 2); deployment 'gateway' lacks span "
        "questions and the pii preset "
        "(a span preset is answered only by a model that lists it)",
        "signal 'photo' cannot be asked of 'vllm-sr/auto': deployment 'local' lacks image input; "
        "deployment 'gateway' lacks image input",
    ]
    local = Card(
        frozenset({"noul", "choice", "score", "span"}),
        presets=frozenset({"pii"}),
        limits=Limits(max_options=2, max_labels=8),
    )
    gateway = Card(frozenset({"noul", "choice", "score"}), frozenset({"text", "image"}))
    assert [line for _, line in card_problems(config, {"local": local, "gateway": gateway})] == [
        "signals pii, team go to 'vllm-sr/auto' in one call, and no member answers them all: deployment 'local' "
        "lacks 3 options (it reads at most 2); deployment 'gateway' lacks span questions and the pii preset "
        "(a span preset is answered only by a model that lists it)",
    ]
