"""System One through a listener: Envoy, the sidecar and real runtimes, as clients see it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typesafe_sdk import Choice, Image, Noul, RetryPolicy, Score, TypeSafeBadRequestError, TypeSafeClient

from tests.conftest import same_to
from tests.e2e.envoy_proc import Envoy, free_port, wait_for
from tests.e2e.http_client import request
from tests.extproc.harness import Plane, SidecarProc, World, envoy_for, metric

pytestmark = pytest.mark.envoy

STATE = "Our export button fails with a 500 since this morning. Open a ticket."
NOUL = {"type": "noul", "instructions": "Does the user report a problem that blocks their work?"}
SEED = {"state": STATE, "questions": {"urgent": NOUL}}
CHOICE = {
    "type": "choice",
    "instructions": "Which team?",
    "criteria": {"billing": "Payments", "engineering": "Outages and bugs", "other": None},
}
SCORE = {"type": "score", "instructions": "How angry?", "criteria": ["calm", "annoyed", "furious"]}


def direct(world: World, runtime: str, body: dict) -> dict:  # type: ignore[type-arg]
    reply = request(
        world.runtimes[runtime].port,
        "POST",
        "/v1/systemone",
        json.dumps(body).encode(),
        {"content-type": "application/json"},
    )
    assert reply.status == 200, reply.body
    return reply.json()  # type: ignore[no-any-return]


def test_the_seed_002_curl_through_a_5_0_listener_answers_as_the_runtime_does(world: World) -> None:
    reply = world.post("v50", "/v1/systemone", {**SEED, "model": "tiny"})
    assert reply.status == 200, reply.body
    # The same answer, to float rounding: one of the two may be computed cold, the other from
    # the runtime's cached state.
    assert same_to(reply.json(), direct(world, "full", SEED), 1e-5)
    # One request id end to end, under both names the clients read.
    assert reply.headers["x-request-id"] and reply.headers["x-typesafe-request-id"] == reply.headers["x-request-id"]
    assert reply.headers["x-vsr-config-version"] == world.plane_sidecar_version("v50")
    # Envoy's access log line for it: the path the client asked for, the member that answered.
    request_id = reply.headers["x-request-id"]
    wait_for(lambda: request_id in world.envoy.log.read_text(), what="the access log line")
    (line,) = [json.loads(entry) for entry in world.envoy.log.read_text().splitlines() if request_id in entry]
    assert line["path"] == "/v1/systemone" and line["status"] == 200 and line["member"] in ("full", "backup")
    assert reply.headers["x-vsr-member"] == line["member"]  # the client is told which member answered


def test_no_model_and_jev_latest_mean_the_listeners_first_model(world: World) -> None:
    for body in (SEED, {**SEED, "model": "jev-latest"}):
        reply = world.post("v50", "/v1/systemone", body)
        assert reply.status == 200, reply.body
        assert reply.json()["model"] in ("tiny", "tiny-26")  # vllm-sr/auto's members


def test_an_unknown_model_is_400_naming_the_listener_and_its_models(world: World) -> None:
    reply = world.post("v50", "/v1/systemone", {**SEED, "model": "vllm-sr/vela3-fast"})
    assert reply.status == 400
    body = reply.json()
    assert body["detail"]["error_type"] == "api_usage_error" and body["reason"] == "unknown_model"
    assert (
        "vllm-sr/vela3-fast" in body["detail"]["message"]
        and "'v50'" in body["detail"]["message"]
        and "vllm-sr/auto" in body["detail"]["message"]
    )


def test_a_bad_request_gets_the_listener_schemas_error_from_the_sidecar(world: World) -> None:
    v50 = world.post(
        "v50",
        "/v1/systemone",
        {"state": "x", "questions": {"q": {"type": "choice", "criteria": {"only": None}}}, "x_extra": 1},
    )
    assert v50.status == 400 and v50.json()["reason"] == "unknown_member" and "error" not in v50.json()
    v40 = world.post("v40", "/v1/systemone", {"state": "x", "questions": {}, "x_extra": 1})
    assert v40.status == 400
    body = v40.json()
    assert body["detail"]["message"] == body["error"]["message"]  # 4.0 clients read `error`, standard ones `detail`
    malformed = world.post("v40", "/v1/systemone", b'{"state": ')
    assert malformed.status == 422 and malformed.json()["detail"][0]["type"] == "json_invalid"


def test_a_4_0_client_gets_4_0_answers_and_the_listener_counts_each_form(world: World) -> None:
    before = world.sidecar.metrics()
    states = [
        {"request": "The invoice is wrong", "history": "hello"},
        {"request": "The app crashes on start", "history": "hi"},
    ]
    legacy = {
        "model": "tiny",
        "states": states,
        "questions": {"team": {"type": "choice", "instructions": "Which team?", "choices": ["billing", "engineering"]}},
    }
    reply = world.post("v40", "/v1/systemone", legacy)
    assert reply.status == 200, reply.body
    doc = reply.json()
    assert list(doc) == ["model", "answers", "usage"] and len(doc["answers"]) == 2
    for state, answer in zip(states, doc["answers"]):
        # Each state answered as a 4.0 request of its own (implicit roles, choices) is answered.
        alone = world.post("v40", "/v1/systemone", {"model": "tiny", "state": state, "questions": legacy["questions"]})
        # (Passes packed differently differ in the last float32 bits: equal within 1e-5.)
        assert alone.status == 200 and same_to(alone.json()["answers"], answer, 1e-5)
        assert set(answer["team"]["probabilities"]) == {"billing", "engineering"}
    after = world.sidecar.metrics()
    counted = {
        form: metric(after, "vsr_systemone_listener_diagnostics_total", listener="v40", form=form)
        - metric(before, "vsr_systemone_listener_diagnostics_total", listener="v40", form=form)
        for form in ("states", "choices", "implicit_roles", "passthrough", "convert")
    }
    assert counted["states"] == 1 and counted["choices"] == 3 and counted["implicit_roles"] == 3
    assert counted["passthrough"] == 3  # 4.0 forms on a 4.0 listener go on as the client's bytes
    # A request that names the pool gets the member's name written in: the internal form.
    assert world.post("v40", "/v1/systemone", {**SEED, "model": "vllm-sr/auto"}).status == 200
    assert metric(
        world.sidecar.metrics(), "vsr_systemone_listener_diagnostics_total", listener="v40", form="convert"
    ) > metric(after, "vsr_systemone_listener_diagnostics_total", listener="v40", form="convert")


def test_batches_and_decisions_through_a_5_0_listener(world: World) -> None:
    batch = {
        "model": "tiny",
        "requests": {
            "a": {"state": "The invoice is wrong", "questions": {"team": CHOICE}},
            "b": {"state": STATE, "questions": {"urgent": NOUL}},
        },
    }
    reply = world.post("v50", "/v1/systemone/batch", batch)
    assert reply.status == 200, reply.body
    doc = reply.json()
    assert list(doc["responses"]) == ["a", "b"]
    assert same_to(doc["responses"]["b"]["answers"], direct(world, "full", SEED)["answers"], 1e-5)
    assert doc["usage"]["input_tokens"] == sum(r["usage"]["input_tokens"] for r in doc["responses"].values())
    # /v1/decisions keeps a failing question's own error in the 200.
    decisions = {
        "state": STATE,
        "roles": None,
        "questions": {"ok": NOUL, "bad": {"type": "score", "criteria": ["only one"]}},
    }
    reply = world.post("v50", "/v1/decisions", decisions)
    assert reply.status == 200, reply.body
    answers = reply.json()["answers"]
    assert answers["ok"]["type"] == "noul" and answers["bad"]["error"]


def _messages_to_sidecar(envoy: Envoy) -> int:
    """Envoy's count of ext_proc messages it sent, over every listener."""
    stats = json.loads(envoy.admin("/stats?format=json&filter=ext_proc\\.stream_msgs_sent$"))["stats"]
    return sum(int(s["value"]) for s in stats)


def _messages(envoy: Envoy, port: int, path: str, body: dict) -> tuple[int, int, dict]:  # type: ignore[type-arg]
    """How many ext_proc messages Envoy sent the sidecar for one request, and the answer."""
    before = _messages_to_sidecar(envoy)
    reply = request(port, "POST", path, json.dumps(body).encode(), {"content-type": "application/json"})
    wait_for(lambda: _messages_to_sidecar(envoy) > before, what="Envoy's ext_proc counters")
    return _messages_to_sidecar(envoy) - before, reply.status, reply.json()


def test_a_member_of_one_host_is_called_by_the_sidecar_in_two_messages(world: World) -> None:
    """``--forwarding auto`` (the default): a member whose cluster has one host is called by the
    sidecar itself, which answers in the request-body phase; the access log still names it."""
    count, status, doc = _messages(world.envoy, world.listeners["v50"], "/v1/systemone", {**SEED, "model": "tiny"})
    assert (count, status) == (2, 200) and same_to(doc, direct(world, "full", SEED), 1e-5)


def test_a_whole_reply_goes_through_unread_and_any_other_is_read(world: World, tmp_path: Path) -> None:
    """Envoy forwarding (``--forwarding envoy``): a runtime's reply that answers every question
    (``x-vsr-reply: whole``) reaches the client without a response-body phase, three messages to
    the sidecar instead of four, and the same answer. A reply with a failed question, or to a
    batch, is still read and re-encoded."""
    listeners = {"v40": free_port(), "v50": free_port()}
    full = world.runtimes["full"].url
    config = f"""version: 2
deployments:
  full: {{provider: systemone, endpoint: "{full}/v1/systemone", model: tiny, schema: vllm-sr/5.0}}
listeners:
  - {{name: v40, address: 127.0.0.1, port: {listeners["v40"]},
     apis: {{systemone: {{schema: vllm-sr/4.0, models: [tiny]}}}}}}
  - {{name: v50, address: 127.0.0.1, port: {listeners["v50"]}, apis: {{systemone: {{models: [tiny]}}}}}}
"""
    sidecar_port = free_port()
    plane = Plane(tmp_path, config, sidecar_port)
    sidecar = SidecarProc(tmp_path, plane.port, port=sidecar_port, args=("--forwarding", "envoy")).wait()
    envoy = envoy_for(tmp_path, plane, sidecar_port)
    try:
        wait_for(
            lambda: request(listeners["v50"], "POST", "/v1/systemone", json.dumps(SEED).encode(), {}).status == 200,
            timeout=30,
            what="the listener",
        )
        count, status, doc = _messages(envoy, listeners["v50"], "/v1/systemone", {**SEED, "model": "tiny"})
        assert (count, status) == (3, 200) and same_to(doc, direct(world, "full", SEED), 1e-5)
        count, status, doc = _messages(
            envoy,
            listeners["v40"],
            "/v1/systemone",
            {"model": "tiny", "state": {"request": "The app crashes"}, "questions": {"urgent": NOUL}},
        )
        assert (count, status) == (3, 200) and 0 <= doc["answers"]["urgent"]["noul"] <= 1
        # A question that failed: on /v1/decisions its error stays in the 200, so the reply is read.
        failing = {
            "model": "tiny",
            "state": STATE,
            "roles": None,
            "questions": {"ok": NOUL, "bad": {"type": "score", "criteria": ["only one"]}},
        }
        count, status, doc = _messages(envoy, listeners["v50"], "/v1/decisions", failing)
        assert (count, status) == (4, 200) and doc["answers"]["bad"]["error"]
        # A batch is answered in the batch's own shape, written here.
        count, status, doc = _messages(
            envoy, listeners["v50"], "/v1/systemone/batch", {"model": "tiny", "requests": {"a": SEED, "b": SEED}}
        )
        assert (count, status) == (4, 200) and list(doc["responses"]) == ["a", "b"]
        # The access log names the member Envoy forwarded to, as it names one the sidecar calls.
        lines = [json.loads(entry) for entry in envoy.log.read_text().splitlines() if entry.startswith("{")]
        assert lines and all(
            line["member"] == "full" and line["upstream_cluster"] == "deployment/full" for line in lines[-4:]
        )
        # A reply Envoy forwarded and sent on unread still names the member.
        whole = request(listeners["v50"], "POST", "/v1/systemone", json.dumps(SEED).encode(), {})
        assert (whole.status, whole.headers["x-vsr-member"]) == (200, "full")
    finally:
        envoy.stop()
        sidecar.stop()
        plane.stop()


def test_the_official_sdk_on_a_5_0_listener(world: World) -> None:
    with TypeSafeClient(api_key="unused", base_url=world.url("v50"), retry=RetryPolicy(max_retries=0)) as client:
        r = client.system_one(
            model="tiny",
            state=STATE,
            questions={
                "urgent": Noul(instructions=NOUL["instructions"]),
                "team": Choice(instructions="Which team?", criteria={"billing": "Payments", "engineering": "Outages"}),
                "anger": Score(instructions="How angry?", criteria=["calm", "annoyed", "furious"]),
            },
        )
        assert (
            r.model == "tiny"
            and 0 <= r.nouls["urgent"].noul <= 1
            and r.choices["team"].choice in ("billing", "engineering")
        )
        assert r.request_id
        names = [m.name for m in client.models.list().models]
        assert names[:3] == ["vllm-sr/auto", "tiny", "tiny-26"]
        # An attached image goes as multipart; no member reads images, so the sidecar says so.
        with pytest.raises(TypeSafeBadRequestError) as caught:
            client.system_one(
                model="tiny",
                state=Image(b"\x89PNG\r\n\x1a\n" + b"\0" * 64),
                questions={"urgent": Noul(instructions="Is it broken?")},
            )
        assert caught.value.status == 400 and caught.value.body["code"] == "unsupported_capability"
        assert "image input" in caught.value.body["detail"]["message"]


def test_listings_name_only_the_offered_models(world: World) -> None:
    v50 = world.get("v50", "/v1/models").json()
    assert [m["name"] for m in v50["models"]] == [
        "vllm-sr/auto",
        "tiny",
        "tiny-26",
        "ha",
        "gateways",
        "jev-1.13.0",
        "tiny-std",
        "mock",
        "busy-first",
    ] and "data" not in v50
    by_name = {m["name"]: m for m in v50["models"]}
    # A runtime member's entry carries its own card, as the runtime lists itself.
    own = json.loads(request(world.runtimes["full"].port, "GET", "/v1/models", b"", {}).body)["models"][0]
    assert (
        by_name["tiny"]["card"]["question_types"] == sorted(own["card"]["question_types"])
        and by_name["tiny"]["version"] == "5.0"
    )
    assert (
        by_name["tiny"]["card"]["limits"] == own["card"]["limits"] and own["card"]["limits"]["max_options"]
    )  # issue 22: limits were left out
    assert {"choice", "noul", "score"} <= set(own["card"]["question_types"])
    assert by_name["jev-1.13.0"]["card"]["question_types"] == [
        "box",
        "choice",
        "noul",
    ]  # its deployment's declared capabilities
    assert all(m["release_date"] for m in v50["models"])
    v40 = world.get("v40", "/v1/models").json()
    assert [m["name"] for m in v40["models"]] == ["vllm-sr/auto", "tiny"] and [d["id"] for d in v40["data"]] == [
        "vllm-sr/auto",
        "tiny",
    ]
    systemone = world.get("v40", "/v1/systemone/models").json()
    assert [m["name"] for m in systemone["models"]] == ["vllm-sr/auto", "tiny"]
    assert systemone["models"][0]["card"]["modalities"] == ["text"]
    chat = world.get("chat", "/v1/models").json()
    assert (
        chat["object"] == "list"
        and [d["id"] for d in chat["data"]] == ["chat-a", "chat-b", "claude-x"]
        and "models" not in chat
    )
    assert world.get("chat", "/v1/systemone/models").status == 404  # not offered there
    keyed = world.get("keyed", "/v1/models", authorization="Bearer listener-key-1").json()
    assert [m["name"] for m in keyed["models"]] == ["tiny"] and [d["id"] for d in keyed["data"]] == ["chat-a"]
