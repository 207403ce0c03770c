"""`vllm-sr route` against a real `vllm-srun serve` on the tiny llama-prefix-bidir checkpoint:
the System One request it sends, the answers, the route that fires, one call for all signals."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sr_control.config.load import load_text
from sr_control.decide.rules import Answer, compile_plan, decide
from sr_runtime.presets import create
from tests.conftest import run_cli
from tests.runtime_server.conftest import ServeProcess, vllm_srun_serve

CONFIG = """\
version: 2
providers:
  models:
    - {{name: small-llm, api_format: {api}, endpoints: ["http://127.0.0.1:9001/v1"]}}
    - {{name: big-llm, api_format: {api}, endpoints: ["http://127.0.0.1:9002/v1"]}}
    - {{name: refund-llm, api_format: {api}, endpoints: ["http://127.0.0.1:9003/v1"]}}
deployments:
  tiny: {{provider: systemone, endpoint: "{endpoint}", model: tiny, schema: vllm-sr/5.0}}
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
  refund: {{keyword: (?i)refund}}
virtual_models:
  vllm-sr/router:
    default: small-llm
    routes:
      - {{name: refunds, priority: 5, when: {{keyword: refund}}, model: refund-llm}}
      - name: answered
        when: {{all: [{{noul: urgent, at_least: 0}}, {{choice: team, is: [billing, engineering, other]}}]}}
        model: [big-llm, small-llm]
      - {{name: calm, when: {{score: urgency, at_most: 3}}, model: small-llm}}
listeners:
  - name: public
    port: 8801
    apis:
      {api}: {{models: [vllm-sr/router]}}
"""
BODIES = {
    "chat_completions": lambda text: {
        "model": "vllm-sr/router",
        "messages": [
            {"role": "user", "content": "How do I export my invoices?"},
            {"role": "assistant", "content": "Use the export button."},
            {"role": "user", "content": text},
        ],
    },
    "responses": lambda text: {"model": "vllm-sr/router", "input": text},
    "messages": lambda text: {
        "model": "vllm-sr/router",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
    },
}
OUTAGE = "Our export button fails with a 500 since this morning."


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    checkpoint = create(tmp_path_factory.mktemp("ckpt") / "tiny", "llama-prefix-bidir", seed=0)
    with vllm_srun_serve(str(checkpoint), "--device", "cpu") as server:
        yield server


def write(tmp_path: Path, api: str, endpoint: str, body: dict[str, Any]) -> tuple[Path, Path]:
    config, request = tmp_path / f"{api}.yaml", tmp_path / f"{api}.json"
    config.write_text(CONFIG.format(api=api, endpoint=endpoint))
    request.write_text(json.dumps(body))
    return config, request


def systemone_requests(url: str) -> float:
    """The runtime's own count of System One requests answered (its /metrics)."""
    text = httpx.get(url + "/metrics").text
    return sum(
        float(v) for v in re.findall(r'^vsr_runtime_requests_total\{endpoint="/v1/systemone"[^}]*\} (\S+)', text, re.M)
    )


def route(config: Path, request: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("route", str(request), "--config", str(config), "--format", "json", *extra)
    assert result.stderr == ""
    return result.returncode, json.loads(result.stdout)


def answers_of(shown: dict[str, Any]) -> dict[str, Answer]:
    out = {}
    for name, doc in shown["signals"].items():
        value = doc["answer"]
        out[name] = Answer(doc["type"], frozenset(value) if isinstance(value, list) else value, doc.get("unknown"))
    return out


@pytest.mark.parametrize("api", list(BODIES))
def test_route_asks_every_signal_in_one_call_and_shows_the_route_that_fires(
    runtime: ServeProcess, tmp_path: Path, api: str
) -> None:
    config, request = write(tmp_path, api, runtime.url + "/v1/systemone", BODIES[api](OUTAGE))
    before = systemone_requests(runtime.url)
    code, shown = route(config, request, "--listener", "public")
    assert systemone_requests(runtime.url) - before == 1  # three model signals, one decision-model call
    assert code == 0
    (call,) = shown["calls"]
    assert call["status"] == 200
    assert call["signals"] == ["urgent", "team", "urgency"]
    assert call["request"]["state"]["request"] == OUTAGE
    assert call["request"]["roles"]["request"] == "user"
    signals = shown["signals"]
    assert 0 <= signals["urgent"]["answer"] <= 1
    assert signals["team"]["answer"] in ("billing", "engineering", "other")
    assert 0 <= signals["urgency"]["answer"] <= 3
    assert signals["refund"] == {"type": "keyword", "answer": False}
    assert [r["outcome"] for r in shown["routes"]] == ["no", "fired", "not tried"]
    assert shown["decision"] == {
        "route": "answered",
        "models": ["big-llm", "small-llm"],
        "model": "big-llm",
        "rewrite": None,
        "judge": None,
        "headers": {"x-vsr-decision": "answered", "x-vsr-model": "big-llm"},
    }
    # What route printed is what the rules give over the answers it printed.
    plan = compile_plan(load_text(config.read_text())).virtual_models["vllm-sr/router"]
    assert decide(plan, answers_of(shown)).route == shown["decision"]["route"]


def test_a_keyword_route_of_higher_priority_fires_first(runtime: ServeProcess, tmp_path: Path) -> None:
    config, request = write(
        tmp_path, "chat_completions", runtime.url + "/v1/systemone", BODIES["chat_completions"]("Refund me now.")
    )
    code, shown = route(config, request)
    assert code == 0
    assert shown["signals"]["refund"] == {"type": "keyword", "answer": True}
    assert shown["decision"]["route"] == "refunds"
    assert shown["decision"]["models"] == ["refund-llm"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_decision_model_that_is_down_leaves_its_signals_unknown_and_on_unknown_decides(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}/v1/systemone"
    config, request = write(tmp_path, "chat_completions", endpoint, BODIES["chat_completions"](OUTAGE))
    code, shown = route(config, request)
    assert code == 0
    assert shown["calls"][0]["error"].startswith("tiny: ConnectError")
    assert shown["signals"]["urgent"]["on_unknown"] == "skip"
    assert shown["signals"]["team"]["on_unknown"] == "other"
    # answered tests urgent (unknown, skip): passed over; calm tests urgency (unknown: false).
    assert [(r["route"], r["outcome"]) for r in shown["routes"]] == [
        ("refunds", "no"),
        ("answered", "skipped"),
        ("calm", "no"),
    ]
    assert shown["decision"]["route"] is None
    assert shown["decision"]["headers"] == {"x-vsr-decision": "default", "x-vsr-model": "small-llm"}


def test_text_output_and_refusals_read_as_one_line(runtime: ServeProcess, tmp_path: Path) -> None:
    config, request = write(
        tmp_path, "chat_completions", runtime.url + "/v1/systemone", BODIES["chat_completions"](OUTAGE)
    )
    result = run_cli("route", str(request), "--config", str(config))
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "vllm-sr/router (chat_completions)"
    assert lines[1].startswith("call vllm-sr/auto via tiny (") and lines[1].endswith(": 200: urgent, team, urgency")
    assert lines[-1] == "decision: answered -> big-llm then small-llm"
    request.write_text(json.dumps({"model": "small-llm", "messages": []}))
    result = run_cli("route", str(request), "--config", str(config))
    assert (result.returncode, result.stdout) == (1, "")
    assert (
        result.stderr
        == f"{request}: model 'small-llm' is not a virtual model of {config} (virtual models: vllm-sr/router)\n"
    )
    request.write_text(json.dumps(BODIES["chat_completions"](OUTAGE)))
    result = run_cli("route", str(request), "--config", str(config), "--listener", "internal")
    assert (result.returncode, result.stderr) == (2, "no listener 'internal' (listeners: public)\n")


def test_a_signal_the_runtimes_card_lacks_is_refused_before_anything_is_asked(
    runtime: ServeProcess, tmp_path: Path
) -> None:
    """The live card (GET /v1/models) is checked as the sidecar will check it when it reads it."""
    config, request = write(
        tmp_path, "chat_completions", runtime.url + "/v1/systemone", BODIES["chat_completions"](OUTAGE)
    )
    text = config.read_text().replace(
        "  refund: {keyword: (?i)refund}\n",
        "  refund: {keyword: (?i)refund}\n"
        "  marks: {type: span, instructions: Mark the error codes., criteria: {code: null}}\n",
    )
    config.write_text(text.replace("when: {keyword: refund}", "when: {span: marks}"))
    before = systemone_requests(runtime.url)
    result = run_cli("route", str(request), "--config", str(config))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"{config}: error: signals.marks: signal 'marks' cannot be asked of 'vllm-sr/auto': "
        "deployment 'tiny' lacks span questions\n"
    )
    assert systemone_requests(runtime.url) == before


HEADS_CONFIG = """\
version: 2
providers:
  models:
    - {{name: small-llm, api_format: chat_completions, endpoints: ["http://127.0.0.1:9001/v1"]}}
    - {{name: private-llm, api_format: chat_completions, endpoints: ["http://127.0.0.1:9003/v1"]}}
deployments:
  heads: {{provider: systemone, endpoint: "{endpoint}", model: heads, schema: vllm-sr/5.0}}
pools:
  vllm-sr/auto: {{members: [heads]}}
signals:
  pii: {{preset: pii, on_unknown: true}}
  topics:
    type: set
    instructions: Which topics does the request touch?
    criteria: {{billing: Payments, outage: Errors and downtime, legal: Contracts and law}}
{extra}virtual_models:
  vllm-sr/router:
    default: small-llm
    routes:
      - {{name: private, when: {{span: pii}}, model: private-llm}}
      - {{name: outage, when: {{set: topics, contains: outage}}, model: small-llm}}
"""


@pytest.fixture(scope="module")
def heads_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """The tiny hybrid-heads checkpoint: a set readout and a pii span head (its card lists pii)."""
    checkpoint = create(tmp_path_factory.mktemp("ckpt") / "heads", "hybrid-heads", seed=0)
    with vllm_srun_serve(str(checkpoint), "--device", "cpu") as server:
        yield server


def test_a_span_preset_and_a_set_signal_are_read_from_the_runtimes_answer(
    heads_runtime: ServeProcess, tmp_path: Path
) -> None:
    config = tmp_path / "heads.yaml"
    config.write_text(HEADS_CONFIG.format(endpoint=heads_runtime.url + "/v1/systemone", extra=""))
    request = tmp_path / "req.json"
    request.write_text(json.dumps(BODIES["chat_completions"]("Call John Smith at 555-0100 about the outage.")))
    code, shown = route(config, request)
    assert code == 0
    (call,) = shown["calls"]
    assert call["request"]["questions"]["pii"]["preset"] == "pii"
    assert set(call["request"]["questions"]["pii"]["criteria"]) == {"person", "email", "phone", "address", "id_number"}
    assert set(shown["signals"]["pii"]["answer"]) <= {"person", "email", "phone", "address", "id_number"}
    assert set(shown["signals"]["topics"]["answer"]) <= {"billing", "outage", "legal"}
    plan = compile_plan(load_text(config.read_text())).virtual_models["vllm-sr/router"]
    assert decide(plan, answers_of(shown)).route == shown["decision"]["route"]
    # A span preset the card does not list is refused, one line, before anything is asked.
    halu = "  halu: {preset: halu, input: [request, context]}\n"
    config.write_text(
        HEADS_CONFIG.format(endpoint=heads_runtime.url + "/v1/systemone", extra=halu).replace(
            "when: {set: topics, contains: outage}", "when: {span: halu}"
        )
    )
    result = run_cli("route", str(request), "--config", str(config))
    assert result.returncode == 1
    assert result.stderr == (
        f"{config}: error: signals.halu: signal 'halu' cannot be asked of 'vllm-sr/auto': deployment 'heads' lacks "
        "the halu preset (a span preset is answered only by a model that lists it)\n"
    )
