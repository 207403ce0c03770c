"""One System One request per decision model, from each LLM API's request body."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from sr_control.config.load import load_text
from sr_control.decide.request import EMPTY, answer_text, build_calls, call_for, parts_of, read_answers
from sr_control.decide.rewrite import response_headers, rewritten
from sr_control.decide.rules import compile_plan, decide, keyword_answers
from systemone import REGISTRY, Target, WireReply
from systemone.ir import ItemResult
from systemone.jsontext import loads, plain
from tests.conftest import ROOT

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n0000").decode()

# The same conversation in the three LLM APIs: a system prompt, an earlier exchange, a tool
# result, and the request with an image.
CHAT = {
    "model": "vllm-sr/router",
    "messages": [
        {"role": "system", "content": "You are the support desk."},
        {"role": "user", "content": "How do I export my invoices as CSV?"},
        {"role": "assistant", "content": "Use the export button."},
        {"role": "tool", "tool_call_id": "1", "content": "status: export service degraded"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "The export button fails with a 500. Refund me!"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            ],
        },
    ],
}
RESPONSES = {
    "model": "vllm-sr/router",
    "instructions": "You are the support desk.",
    "input": [
        {"role": "user", "content": "How do I export my invoices as CSV?"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Use the export button."}]},
        {"type": "function_call_output", "call_id": "1", "output": "status: export service degraded"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "The export button fails with a 500. Refund me!"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
            ],
        },
    ],
}
MESSAGES = {
    "model": "vllm-sr/router",
    "max_tokens": 100,
    "system": "You are the support desk.",
    "messages": [
        {"role": "user", "content": "How do I export my invoices as CSV?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Use the export button."}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "1", "content": "status: export service degraded"}],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "The export button fails with a 500. Refund me!"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            ],
        },
    ],
}
PARTS = {
    "request": "The export button fails with a 500. Refund me!",
    "history": "How do I export my invoices as CSV?",
    "previous_turns": "user: How do I export my invoices as CSV?\nassistant: Use the export button.",
    "previous_answer": "Use the export button.",
    "tool_results": "status: export service degraded",
    "context": "You are the support desk.",
}

CONFIG = """\
version: 2
providers:
  models:
    - {name: small-llm, api_format: chat_completions, endpoints: ["http://127.0.0.1:9001/v1"]}
    - {name: big-llm, api_format: chat_completions, endpoints: ["http://127.0.0.1:9002/v1"]}
deployments:
  local: {provider: systemone, endpoint: "http://127.0.0.1:8100/v1/systemone", model: d3, schema: vllm-sr/5.0}
pools:
  vllm-sr/auto: {members: [local]}
signals:
  urgent: {type: noul, instructions: Does it block the user's work?, input: [request, history]}
  team:
    type: choice
    instructions: Which team?
    criteria: {billing: null, engineering: null}
    input: [request, tool_results]
  urgency: {preset: urgency, timeout_ms: 2500}
  looks: {type: noul, instructions: Does the picture show an error?, input: [request, image]}
  refund: {keyword: (?i)refund}
virtual_models:
  vllm-sr/router:
    default: small-llm
    routes:
      - {name: engineering, when: {all: [{choice: team, is: engineering}, {noul: urgent}]}, model: big-llm,
         rewrite: {system_prompt: Be brief.}}
      - {name: visual, when: {noul: looks, above: 0.9}, model: big-llm}
      - {name: slow, when: {score: urgency, at_least: 3}, model: big-llm}
      - {name: refunds, when: {keyword: refund}, model: small-llm}
"""


@pytest.mark.parametrize(
    ("api", "body"), [("chat_completions", CHAT), ("responses", RESPONSES), ("messages", MESSAGES)]
)
def test_each_llm_api_gives_the_same_parts_and_the_request_turns_image(api: str, body: dict[str, Any]) -> None:
    parts = parts_of(api, body)
    assert dict(parts.text) == PARTS
    assert [(m.kind, m.format, m.data_base64) for m in parts.media] == [("image", "png", PNG)]


@pytest.mark.parametrize(
    ("api", "body"), [("chat_completions", CHAT), ("responses", RESPONSES), ("messages", MESSAGES)]
)
def test_one_request_asks_every_signal_over_one_state_with_explicit_roles(api: str, body: dict[str, Any]) -> None:
    plan = compile_plan(load_text(CONFIG)).virtual_models["vllm-sr/router"]
    (call,) = build_calls(plan, parts_of(api, body))
    assert call.model == "vllm-sr/auto"
    assert call.signals == ("team", "urgent", "looks", "urgency")
    assert call.deadline_ms == 2500  # the longest timeout of the call's signals
    (wire,) = REGISTRY.client("vllm-sr/5.0").plan(call.request, Target("vllm-sr/5.0", "d3")).calls
    sent = plain(loads(wire.body))
    assert sent["state"] == [
        "⟦img-1⟧",
        {"request": PARTS["request"], "history": PARTS["history"], "tool_results": PARTS["tool_results"]},
    ]
    assert sent["roles"] == {"request": "user", "history": "context", "tool_results": "context"}
    assert sent["assets"] == {"⟦img-1⟧": {"type": "image", "format": "png", "data_base64": PNG}}
    assert sent["questions"]["urgency"] == {
        "type": "score",
        "instructions": "How urgent is the request?",
        "criteria": ["Can wait", "Needs attention this week", "Needs attention today", "Needs attention now"],
        "preset": "urgency",
    }
    assert sent["options"] == {"deadline_ms": 2500}


def test_answers_decide_the_route_and_the_rewrite_applies_to_the_body() -> None:
    plan = compile_plan(load_text(CONFIG)).virtual_models["vllm-sr/router"]
    (call,) = build_calls(plan, parts_of("chat_completions", CHAT))
    reply = json.dumps(
        {
            "model": "d3",
            "answers": {
                "team": {"type": "choice", "choice": "engineering"},
                "urgent": {"type": "noul", "noul": 0.8},
                "looks": {"type": "noul", "error": "invalid_question", "message": "no image input"},
                "urgency": {"type": "score", "score": 1.2},
            },
        }
    ).encode()
    codec = REGISTRY.client("vllm-sr/5.0")
    wire_plan = codec.plan(call.request, Target("vllm-sr/5.0", "d3"))
    result = codec.decode_reply(wire_plan, wire_plan.calls[0], WireReply(200, reply))[""]
    answers = read_answers(call, result)
    assert answers["looks"].unknown == "invalid_question: no image input"
    decision = decide(plan, answers)
    assert (decision.route, decision.models) == ("engineering", ("big-llm",))
    body = rewritten("chat_completions", CHAT, decision.models[0], decision.rewrite)
    assert body["model"] == "big-llm"
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1:] == CHAT["messages"][1:]
    assert response_headers(decision, "big-llm") == (("x-vsr-decision", "engineering"), ("x-vsr-model", "big-llm"))


def test_a_failed_call_makes_only_its_signals_unknown_and_on_unknown_decides() -> None:
    plan = compile_plan(load_text(CONFIG)).virtual_models["vllm-sr/router"]
    (call,) = build_calls(plan, parts_of("messages", MESSAGES))
    answers = read_answers(call, None, failure="timed out after 2500 ms")
    assert {a.unknown for a in answers.values()} == {"timed out after 2500 ms"}
    decision = decide(plan, answers)
    # engineering, visual and slow test unknown signals (on_unknown: skip); the keyword still answers.
    assert decision.route is None  # the refunds keyword is not in answers: read_answers is the models' part
    decision = decide(plan, answers | keyword_answers(plan, parts_of("messages", MESSAGES).text))
    assert decision.route == "refunds"
    assert [t.outcome for t in decision.trace] == ["skipped", "skipped", "skipped", "fired"]


def test_a_refused_call_error_reads_as_unknown_with_its_code() -> None:
    plan = compile_plan(load_text(CONFIG)).virtual_models["vllm-sr/router"]
    (call,) = build_calls(plan, parts_of("chat_completions", CHAT))
    codec = REGISTRY.client("vllm-sr/5.0")
    wire_plan = codec.plan(call.request, Target("vllm-sr/5.0", "d3"))
    refused = json.dumps({"detail": [], "code": "question_failed", "question": "looks", "reason": "x"}).encode()
    result: ItemResult = codec.decode_reply(wire_plan, wire_plan.calls[0], WireReply(422, refused))[""]
    assert all(a.unknown and a.unknown.startswith("question_failed") for a in read_answers(call, result).values())


@pytest.mark.parametrize(
    ("api", "response", "text"),
    [
        ("chat_completions", {"choices": [{"message": {"role": "assistant", "content": "Done."}}]}, "Done."),
        (
            "responses",
            {"output": [{"type": "message", "content": [{"type": "output_text", "text": "Done."}]}]},
            "Done.",
        ),
        ("messages", {"content": [{"type": "text", "text": "Done."}]}, "Done."),
    ],
)
def test_a_judge_reads_the_answer_text_of_each_api(api: str, response: dict[str, Any], text: str) -> None:
    assert answer_text(api, response) == text


def test_the_example_config_is_valid_and_decides() -> None:
    config = load_text((ROOT / "examples" / "decide.yaml").read_text(), "examples/decide.yaml")
    plan = compile_plan(config).virtual_models["vllm-sr/router"]
    (call,) = build_calls(plan, parts_of("chat_completions", CHAT))
    assert call.signals == ("pii", "urgency", "team")


def test_a_call_whose_parts_the_conversation_lacks_is_empty_and_its_signals_unknown() -> None:
    plan = compile_plan(load_text(CONFIG)).virtual_models["vllm-sr/router"]
    history_only = plan.signals["urgent"].model_copy(update={"input": ["history"]})
    first_turn = parts_of("chat_completions", {"messages": [{"role": "user", "content": "Hi"}]})
    call = call_for("vllm-sr/auto", {"urgent": history_only}, first_turn)
    assert call.empty
    assert read_answers(call, None, EMPTY)["urgent"].unknown == EMPTY
    assert not call_for("vllm-sr/auto", {"urgent": plan.signals["urgent"]}, first_turn).empty
