"""The Decide path live: a real Envoy fed by the control plane, a real ``vllm-sr extproc serve``
sidecar and a real ``vllm-srun serve`` runtime on the tiny llama-prefix-bidir checkpoint as the
decision model. The two LLMs are OpenAI-compatible test upstreams started by this file
(``ChatUpstream``): each answers a chat completion saying who it is and what it received.

The tiny checkpoint's answers are random, so the routes that read them hold for any answer
(``at_least: 0``, every option); what tells the requests apart is a keyword signal over the
conversation, beside four model signals asked in one call.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sr_runtime.presets import create
from tests.conftest import run_cli
from tests.e2e.envoy_proc import Envoy, free_port, wait_for
from tests.e2e.http_client import Reply, request
from tests.extproc.harness import Plane, Runtime, SidecarProc, envoy_for, get_text, metric

CONFIG = """\
version: 2
providers:
  models:
    - {{name: small-llm, api_format: chat_completions, endpoints: ["{small}/v1"]}}
    - {{name: big-llm, api_format: chat_completions, endpoints: ["{big}/v1"]}}
    - {{name: claude-like, api_format: messages, endpoints: ["{big}/v1"]}}
    - {{name: keyed-llm, api_format: chat_completions, endpoints: ["{big}/v1"], api_key_env: VSR_TEST_KEYED_LLM}}
deployments:
  tiny: {{provider: systemone, endpoint: "{runtime}/v1/systemone", model: tiny, schema: vllm-sr/5.0}}
pools:
  vllm-sr/auto: {{members: [tiny]}}
signals:
  urgent:
    type: noul
    instructions: Does the user report a problem that blocks their work?
    input: [request, history]
  team:
    type: choice
    instructions: Which team should handle this request?
    criteria: {{billing: Payments and refunds, engineering: Outages and bugs, other: Anything else}}
    on_unknown: other
  urgency: {{preset: urgency, on_unknown: false}}
  polite: {{type: noul, instructions: Is the user polite?}}
  outage: {{keyword: '(?i)\\b(outage|down)\\b'}}
  zebra: {{keyword: (?i)zebra}}
  rushed:
    type: noul
    instructions: Is this request urgent?
    timeout_ms: 1                       # no runtime answers within 1 ms: always unknown
    on_unknown: true
  weak:
    type: noul
    instructions: Does the answer fail to address the request?
    input: [request, answer]
{private_signal}virtual_models:
  vllm-sr/router:
    default: small-llm
    routes:
      - name: outages
        when:
          all:
            - {{keyword: outage}}
            - {{noul: urgent, at_least: 0}}
            - {{choice: team, is: [billing, engineering, other]}}
            - {{score: urgency, at_least: 0}}
            - {{noul: polite, at_least: 0}}
        model: big-llm
        rewrite:
          system_prompt: Answer in one line.
          headers: {{x-team: engineering}}
      - name: everyday
        when: {{any: [{{noul: urgent, at_least: 0}}, {{score: urgency, at_least: 0}}, {{noul: polite, at_least: 0}}]}}
        model: small-llm
  vllm-sr/hurried:
    routes:
      - {{name: rushed, when: {{noul: rushed, above: 1}}, model: big-llm}}
  vllm-sr/strict:
    routes:
      - {{name: zebras, when: {{keyword: zebra}}, model: big-llm}}
  vllm-sr/judged:
    routes:
      - {{name: checked, model: [small-llm, big-llm], judge: weak}}
  vllm-sr/kept:
    routes:
      - {{name: kept, model: [small-llm, big-llm], judge: never}}
  vllm-sr/keyed:
    routes:
      - {{name: checked, model: [small-llm, keyed-llm], judge: weak}}
  vllm-sr/claude:
    routes:
      - {{name: outages, when: {{keyword: outage}}, model: claude-like}}
{private_model}judges:
  weak: {{when: {{noul: weak, at_least: 0}}}}   # holds for any answer the tiny model gives
  never: {{when: {{noul: weak, above: 1}}}}     # holds for none
listeners:
  - name: public
    address: 127.0.0.1
    port: {port}
    apis:
      chat_completions:
        models: [vllm-sr/router, vllm-sr/hurried, vllm-sr/strict, vllm-sr/judged, vllm-sr/kept,
                 vllm-sr/keyed, {private_listed}small-llm]
      messages: {{models: [vllm-sr/claude]}}
"""

# A signal tiny's card cannot answer (a span preset it does not list). The control plane takes
# it (a card is the runtime's, read live); the sidecar asks no member for it, so it is unknown;
# ``vllm-sr route`` reads the card first and refuses the file, one line. The config route is
# shown goes without it.
PRIVATE = {
    "private_signal": "  pii: {preset: pii, on_unknown: true}\n",
    "private_model": (
        "  vllm-sr/private:\n    default: small-llm\n    routes:\n"
        "      - {name: private, when: {span: pii}, model: big-llm}\n"
    ),
    "private_listed": "vllm-sr/private, ",
}
NO_PRIVATE = dict.fromkeys(PRIVATE, "")


class ChatUpstream:
    """An OpenAI-compatible test upstream: answers every chat completion with a message naming
    itself, and records the bodies and headers it received."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.received: list[tuple[dict[str, Any], dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                outer.received.append((body, {k.lower(): v for k, v in self.headers.items()}))
                out = json.dumps(
                    {
                        "id": "chatcmpl-test",
                        "object": "chat.completion",
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": f"{outer.name} answers"},
                                "finish_reason": "stop",
                            }
                        ],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Live:
    port: int
    config: Path
    runtime: Runtime
    sidecar: SidecarProc
    envoy: Envoy
    small: ChatUpstream
    big: ChatUpstream

    def chat(self, model: str, *turns: str, **extra: Any) -> Reply:
        body = json.dumps(chat_body(model, *turns) | extra).encode()
        return request(self.port, "POST", "/v1/chat/completions", body, {"content-type": "application/json"})

    def decision_calls(self) -> float:
        """The runtime's own count of System One requests answered (its /metrics)."""
        return metric(get_text(self.runtime.url + "/metrics"), "vsr_runtime_requests_total", endpoint="/v1/systemone")


def chat_body(model: str, *turns: str) -> dict[str, Any]:
    roles = ["user", "assistant"]
    return {
        "model": model,
        "messages": [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)],
    }


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    directory = tmp_path_factory.mktemp("decide-live")
    checkpoint = create(directory / "tiny", "llama-prefix-bidir", seed=0)
    runtime = Runtime(checkpoint, directory / "runtime.log").start()
    small, big = ChatUpstream("small-llm"), ChatUpstream("big-llm")
    port, sidecar_port = free_port(), free_port()
    urls = {"small": small.url, "big": big.url, "runtime": runtime.url, "port": port}
    text = CONFIG.format(**urls, **PRIVATE)
    (directory / "route.yaml").write_text(CONFIG.format(**urls, **NO_PRIVATE))
    parts: list[Any] = []
    try:
        runtime.wait()
        plane = Plane(directory, text, sidecar_port)
        parts.append(plane)
        sidecar = SidecarProc(directory, plane.port, port=sidecar_port).wait()
        parts.append(sidecar)
        # keyed-llm's key: Envoy's, which it adds to what it forwards; the sidecar has none.
        envoy: Envoy = envoy_for(directory, plane, sidecar_port, env={"VSR_TEST_KEYED_LLM": "sk-keyed"})
        parts.append(envoy)

        def listed() -> bool:
            try:
                reply = request(port, "GET", "/v1/models", None, {})
            except OSError:
                return False
            return reply.status == 200 and "vllm-sr/router" in reply.body.decode()

        wait_for(listed, timeout=60, what="the listener to list vllm-sr/router")
        yield Live(port, plane.config, runtime, sidecar, envoy, small, big)
    finally:
        for part in reversed(parts):
            part.stop()
        runtime.stop()
        small.stop()
        big.stop()


def access_line(live: Live, request_id: str) -> dict[str, Any] | None:
    """Envoy's access log line of the request (JSON, on Envoy's stdout)."""
    for line in live.envoy.log.read_text().splitlines():
        if line.startswith("{") and request_id in line:
            doc = json.loads(line)
            if doc.get("request_id") == request_id:
                return dict(doc)
    return None


def logged(live: Live, reply: Reply) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(
        lambda: access_line(live, reply.headers["x-typesafe-request-id"]), timeout=10, what="the access log line"
    )
    return found


def route_cli(live: Live, tmp_path: Path, body: dict[str, Any]) -> dict[str, Any]:
    """What ``vllm-sr route`` decides for the same request and config."""
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
    config = live.config.with_name("route.yaml")
    result = run_cli("route", str(path), "--config", str(config), "--format", "json")
    assert result.stderr == ""
    return dict(json.loads(result.stdout)["decision"])


OUTAGE = "Our export service is down since this morning."
EVERYDAY = "How do I export my invoices?"


def test_models_listing_names_the_virtual_models(live: Live) -> None:
    reply = request(live.port, "GET", "/v1/models", None, {})
    assert reply.status == 200
    ids = [m["id"] for m in reply.json()["data"]]
    assert ids == [
        "vllm-sr/router",
        "vllm-sr/hurried",
        "vllm-sr/strict",
        "vllm-sr/judged",
        "vllm-sr/kept",
        "vllm-sr/keyed",
        "vllm-sr/private",
        "small-llm",
        "vllm-sr/claude",
    ]


@pytest.mark.parametrize(
    ("turns", "upstream", "decision"),
    [
        ((EVERYDAY, "Use the export button.", OUTAGE), "big-llm", "outages"),
        ((OUTAGE, "We are looking into it.", EVERYDAY), "small-llm", "everyday"),
    ],
)
def test_the_conversation_routes_to_an_llm_in_one_decision_call(
    live: Live, tmp_path: Path, turns: tuple[str, ...], upstream: str, decision: str
) -> None:
    before, counted = live.decision_calls(), live.sidecar.metrics()
    reply = live.chat("vllm-sr/router", *turns)
    # Four model signals, one decision model: one call.
    assert live.decision_calls() - before == 1
    assert reply.status == 200, reply.body
    assert reply.headers["x-vsr-decision"] == decision
    assert reply.headers["x-vsr-model"] == upstream
    answer = reply.json()
    assert answer["choices"][0]["message"]["content"] == f"{upstream} answers"
    assert answer["model"] == upstream  # the body Envoy forwarded names the chosen model
    got, headers = (live.big if upstream == "big-llm" else live.small).received[-1]
    if decision == "outages":  # the route's rewrite: its system prompt first, its header
        assert got["messages"][0] == {"role": "system", "content": "Answer in one line."}
        assert headers["x-team"] == "engineering"
    else:
        assert got["messages"] == chat_body("vllm-sr/router", *turns)["messages"]
        assert "x-team" not in headers
    shown = route_cli(live, tmp_path, chat_body("vllm-sr/router", *turns))
    assert (shown["route"], shown["model"]) == (decision, upstream)
    # Envoy's access log line has the decision and every signal's answer.
    line = logged(live, reply)
    assert (line["decision"], line["model"], line["status"]) == (decision, upstream, 200)
    assert line["signals"]["outage"] is (decision == "outages")
    assert set(line["signals"]) == {"outage", "urgent", "team", "urgency", "polite"}
    assert 0 <= line["signals"]["urgent"] <= 1  # a noul answer: P(yes)
    assert line["signals"]["team"] in ("billing", "engineering", "other")
    metrics = live.sidecar.metrics()
    for name in ("vsr_decide_model_calls_per_request_count", "vsr_decide_model_calls_per_request_sum"):
        assert metric(metrics, name) - metric(counted, name) == 1  # one request, one call
    assert metric(metrics, "vsr_decide_seconds_count", listener="public") > metric(
        counted, "vsr_decide_seconds_count", listener="public"
    )
    assert metric(metrics, "vsr_decide_requests_total", listener="public", decision=decision, model=upstream) >= 1
    assert metric(metrics, "vsr_decide_signal_answers_total", signal="outage") >= 1


def test_a_timed_out_decision_model_applies_on_unknown_and_the_request_succeeds(live: Live, tmp_path: Path) -> None:
    reply = live.chat("vllm-sr/hurried", EVERYDAY)
    assert reply.status == 200, reply.body
    # rushed's test (above 1) holds for no answer; unknown with on_unknown true, it holds.
    assert (reply.headers["x-vsr-decision"], reply.headers["x-vsr-model"]) == ("rushed", "big-llm")
    assert reply.json()["choices"][0]["message"]["content"] == "big-llm answers"
    assert metric(live.sidecar.metrics(), "vsr_decide_signal_answers_total", signal="rushed", answer="unknown") >= 1
    shown = route_cli(live, tmp_path, chat_body("vllm-sr/hurried", EVERYDAY))
    assert (shown["route"], shown["model"]) == ("rushed", "big-llm")


def test_no_route_and_no_default_is_the_apis_own_error(live: Live, tmp_path: Path) -> None:
    reply = live.chat("vllm-sr/strict", EVERYDAY)
    assert reply.status == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "no_route"
    assert re.search(r"no route of virtual model 'vllm-sr/strict' matches", error["message"])
    line = logged(live, reply)
    assert (line["decision"], line["model"], line["signals"], line["status"]) == ("none", "", {"zebra": False}, 400)
    assert route_cli(live, tmp_path, chat_body("vllm-sr/strict", EVERYDAY))["model"] is None


def test_a_model_the_listener_serves_itself_goes_straight_to_it(live: Live) -> None:
    reply = live.chat("small-llm", EVERYDAY)
    assert reply.status == 200
    assert reply.json()["choices"][0]["message"]["content"] == "small-llm answers"
    assert "x-vsr-decision" not in reply.headers and "x-vsr-model" not in reply.headers
    line = logged(live, reply)
    assert (line["decision"], line["model"], line["signals"]) == (None, None, None)


def test_a_judge_that_holds_escalates_the_answer_to_the_routes_next_model(live: Live, tmp_path: Path) -> None:
    small, big, calls = len(live.small.received), len(live.big.received), live.decision_calls()
    reply = live.chat("vllm-sr/judged", EVERYDAY)
    assert reply.status == 200, reply.body
    assert (reply.headers["x-vsr-decision"], reply.headers["x-vsr-model"]) == ("checked", "big-llm")
    assert reply.json()["choices"][0]["message"]["content"] == "big-llm answers"
    assert (len(live.small.received) - small, len(live.big.received) - big) == (1, 1)
    assert live.big.received[-1][0]["model"] == "big-llm"
    assert live.decision_calls() - calls == 1  # the judge's one call over the first answer
    line = logged(live, reply)
    assert (line["decision"], line["model"]) == ("checked", "big-llm")  # the model that answered
    assert 0 <= line["signals"]["weak"] <= 1
    # vllm-sr route never calls the LLM: it shows the route and the models the judge may try.
    shown = route_cli(live, tmp_path, chat_body("vllm-sr/judged", EVERYDAY))
    assert (shown["route"], shown["models"], shown["judge"]) == ("checked", ["small-llm", "big-llm"], "weak")


def test_an_escalation_to_a_keyed_provider_carries_the_key_envoy_holds(live: Live) -> None:
    """keyed-llm's key is Envoy's alone (as the chart gives it): the escalation goes through
    the listener again, and Envoy adds the key as it does for a first model."""
    big = len(live.big.received)
    reply = live.chat("vllm-sr/keyed", EVERYDAY)
    assert reply.status == 200, reply.body
    assert (reply.headers["x-vsr-decision"], reply.headers["x-vsr-model"]) == ("checked", "keyed-llm")
    assert reply.json()["choices"][0]["message"]["content"] == "big-llm answers"  # keyed-llm's upstream
    assert len(live.big.received) == big + 1
    got, headers = live.big.received[-1]
    assert got["model"] == "keyed-llm"
    assert headers["authorization"] == "Bearer sk-keyed"
    assert "x-vsr-escalation" not in headers


def test_a_client_cannot_pass_for_an_escalation(live: Live) -> None:
    body = json.dumps(chat_body("keyed-llm", EVERYDAY)).encode()
    headers = {"content-type": "application/json", "x-vsr-escalation": "a-guess.\u00e9"}
    reply = request(live.port, "POST", "/v1/chat/completions", body, headers)
    assert reply.status == 404
    assert reply.json()["error"]["code"] == "model_not_found"


def test_a_judge_that_does_not_hold_keeps_the_answer(live: Live, tmp_path: Path) -> None:
    big, calls = len(live.big.received), live.decision_calls()
    reply = live.chat("vllm-sr/kept", EVERYDAY)
    assert reply.status == 200, reply.body
    assert (reply.headers["x-vsr-decision"], reply.headers["x-vsr-model"]) == ("kept", "small-llm")
    assert reply.json()["choices"][0]["message"]["content"] == "small-llm answers"
    assert len(live.big.received) == big
    assert live.decision_calls() - calls == 1
    shown = route_cli(live, tmp_path, chat_body("vllm-sr/kept", EVERYDAY))
    assert (shown["route"], shown["models"], shown["judge"]) == ("kept", ["small-llm", "big-llm"], "never")


def test_a_streamed_answer_passes_through_unjudged(live: Live, tmp_path: Path) -> None:
    big, calls = len(live.big.received), live.decision_calls()
    reply = live.chat("vllm-sr/judged", EVERYDAY, stream=True)
    assert reply.status == 200, reply.body
    assert (reply.headers["x-vsr-decision"], reply.headers["x-vsr-model"]) == ("checked", "small-llm")
    assert reply.json()["choices"][0]["message"]["content"] == "small-llm answers"
    assert len(live.big.received) == big
    assert live.decision_calls() == calls  # no judge call
    shown = route_cli(live, tmp_path, chat_body("vllm-sr/judged", EVERYDAY) | {"stream": True})
    assert (shown["route"], shown["model"]) == ("checked", "small-llm")


def test_a_member_whose_card_lacks_the_signal_is_not_asked_and_on_unknown_decides(live: Live, tmp_path: Path) -> None:
    calls = live.decision_calls()
    reply = live.chat("vllm-sr/private", EVERYDAY)
    assert reply.status == 200, reply.body
    # pii is unknown (no member's card lists the preset); on_unknown true: the route fires.
    assert (reply.headers["x-vsr-decision"], reply.headers["x-vsr-model"]) == ("private", "big-llm")
    assert live.decision_calls() == calls
    assert metric(live.sidecar.metrics(), "vsr_decide_signal_answers_total", signal="pii", answer="unknown") >= 1
    line = logged(live, reply)
    assert line["signals"]["pii"].startswith("unknown: tiny cannot answer: pii needs span questions")
    # The sidecar said so once, when the config and tiny's card came in, naming signal and model.
    warned = [
        json.loads(x)
        for x in live.sidecar.log.read_text().splitlines()
        if x.startswith("{") and '"signal cannot be asked"' in x
    ]
    assert [w["problem"] for w in warned] == [
        "signal 'pii' cannot be asked of 'vllm-sr/auto': deployment 'tiny' lacks span questions and the pii "
        "preset (a span preset is answered only by a model that lists it)"
    ]
    path = tmp_path / "request.json"
    path.write_text(json.dumps(chat_body("vllm-sr/private", EVERYDAY)))
    result = run_cli("route", str(path), "--config", str(live.config))
    assert result.returncode == 1
    assert result.stderr == (
        f"{live.config}: error: signals.pii: signal 'pii' cannot be asked of 'vllm-sr/auto': deployment 'tiny' "
        "lacks span questions and the pii preset (a span preset is answered only by a model that lists it)\n"
    )


def test_a_messages_request_is_decided_and_its_error_is_anthropics(live: Live, tmp_path: Path) -> None:
    def body(text: str) -> dict[str, Any]:
        return {"model": "vllm-sr/claude", "max_tokens": 64, "messages": [{"role": "user", "content": text}]}

    def messages(text: str) -> Reply:
        return request(
            live.port, "POST", "/v1/messages", json.dumps(body(text)).encode(), {"content-type": "application/json"}
        )

    reply = messages(OUTAGE)
    assert reply.status == 200, reply.body
    assert (reply.headers["x-vsr-decision"], reply.headers["x-vsr-model"]) == ("outages", "claude-like")
    assert live.big.received[-1][0]["model"] == "claude-like"
    assert (route_cli(live, tmp_path, body(OUTAGE))["route"], route_cli(live, tmp_path, body(EVERYDAY))["model"]) == (
        "outages",
        None,
    )
    reply = messages(EVERYDAY)
    assert reply.status == 400
    doc = reply.json()
    assert doc["type"] == "error"
    assert doc["error"]["type"] == "invalid_request_error"
    assert doc["error"]["message"].startswith("no route of virtual model 'vllm-sr/claude' matches this request")
