"""Capability routing, standard targets and fail-over, through Envoy to real members."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest

from tests.conftest import same_to
from tests.extproc.harness import Runtime, World, metric

pytestmark = pytest.mark.envoy

STATE = "Our export button fails with a 500 since this morning. Open a ticket."
NOUL = {"type": "noul", "instructions": "Does the user report a problem that blocks their work?"}


def choice(options: int) -> dict:  # type: ignore[type-arg]
    return {"type": "choice", "instructions": "Which one?", "criteria": {f"option {i}": None for i in range(options)}}


def test_a_request_goes_only_to_members_able_to_answer_it(world: World) -> None:
    # 40 options: only `full` reads them (`capped`'s card says 26 at most).
    for _ in range(4):
        reply = world.post(
            "v50", "/v1/systemone", {"model": "vllm-sr/auto", "state": STATE, "questions": {"pick": choice(40)}}
        )
        assert reply.status == 200, reply.body
        assert reply.json()["model"] == "tiny"
    # 10 options: both can; equally idle members take turns.
    served = Counter(
        world.post("v50", "/v1/systemone", {"state": STATE, "questions": {"pick": choice(10)}}).json()["model"]
        for _ in range(6)
    )
    assert set(served) == {"tiny", "tiny-26"}


def test_no_capable_member_is_400_unsupported_capability_naming_what_each_lacks(world: World) -> None:
    reply = world.post(
        "v50",
        "/v1/systemone",
        {"state": STATE, "questions": {"who": {"type": "span", "criteria": {"person": None}}, "pick": choice(40)}},
    )
    assert reply.status == 400, reply.body
    body = reply.json()
    assert body["code"] == "unsupported_capability" and body["detail"]["error_type"] == "api_usage_error"
    message = body["detail"]["message"]
    assert "vllm-sr/auto" in message
    assert "capped: cannot answer span questions, choice questions of 40 options (it reads at most 26)" in message
    assert "full: cannot answer span questions" in message


def test_declared_capabilities_route_members_without_cards(world: World) -> None:
    """`mock` declares noul and choice, `standard` noul, choice and score (neither has a card)."""
    score = {"type": "score", "instructions": "How angry?", "criteria": ["calm", "furious"]}
    for _ in range(3):
        reply = world.post("v50", "/v1/systemone", {"model": "gateways", "state": STATE, "questions": {"anger": score}})
        assert reply.status == 200, reply.body
        assert reply.json()["model"] == "tiny-std"
    reply = world.post("v50", "/v1/systemone", {"model": "jev-1.13.0", "state": STATE, "questions": {"anger": score}})
    assert reply.status == 400 and "mock: cannot answer score questions" in reply.json()["detail"]["message"]


def test_a_standard_target_gets_split_standard_calls_with_state_text(world: World) -> None:
    states = {
        f"doc_{i}": {"request": "How long is the refund window?", "candidate": f"Passage {i} about refunds."}
        for i in range(3)
    }
    batch = {
        "model": "jev-1.13.0",
        "requests": {
            name: {"state": s, "roles": {"request": "user", "candidate": "context"}, "questions": {"relevant": NOUL}}
            for name, s in states.items()
        },
        "options": {"deadline_ms": 5000},
    }
    calls_before = len(world.mock.bodies)
    reply = world.post("v50", "/v1/systemone/batch", batch)
    assert reply.status == 200, reply.body
    sent = world.mock.bodies[calls_before:]
    assert len(sent) == 3  # one standard call per request
    for call in sent:
        assert set(call) == {"model", "state", "questions"}  # roles and options are not the standard's
        assert call["model"] == "jev-1.13.0" and isinstance(call["state"], str)
    assert sorted(c["state"] for c in sent) == sorted(json.dumps(s, ensure_ascii=False) for s in states.values())
    doc = reply.json()
    assert list(doc["responses"]) == list(states)
    # Reassembled: each answer is what the mock gives that text on its own.
    for name, s in states.items():
        alone = world.mock_direct(
            {"model": "jev-1.13.0", "state": json.dumps(s, ensure_ascii=False), "questions": {"relevant": NOUL}}
        )
        assert doc["responses"][name]["answers"] == alone["answers"]


def test_a_vllm_srun_standard_runtime_answers_split_calls_as_its_5_0_self_would(world: World) -> None:
    states = [{"request": f"Ticket {i}: the export fails"} for i in range(4)]
    before = world.runtimes["standard"].requests_served("/v1/systemone")
    batch = {
        "model": "tiny-std",
        "requests": {f"r{i}": {"state": s, "questions": {"urgent": NOUL}} for i, s in enumerate(states)},
    }
    reply = world.post("v50", "/v1/systemone/batch", batch)
    assert reply.status == 200, reply.body
    assert world.runtimes["standard"].requests_served("/v1/systemone") - before == 4
    # The tiny checkpoint reads an object state as its JSON text: state_text changes no answer.
    same = world.post("v50", "/v1/systemone/batch", {**batch, "model": "tiny"}).json()
    assert same_to(
        [r["answers"] for r in reply.json()["responses"].values()],
        [r["answers"] for r in same["responses"].values()],
        1e-5,
    )


def test_stopping_a_member_under_load_loses_no_request(world: World) -> None:
    """`ha` is full and backup (the same weights). Backup is killed while requests flow; every
    request is still answered, by full, and the sidecar counts the fail-overs."""
    errors: list[str] = []
    answered = Counter[str]()
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            reply = world.post("v50", "/v1/systemone", {"model": "ha", "state": STATE, "questions": {"urgent": NOUL}})
            if reply.status != 200:
                errors.append(f"{reply.status} {reply.body[:300]!r}")
            else:
                answered[reply.json()["model"]] += 1

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    backup = world.runtimes["backup"]
    try:
        time.sleep(1.5)
        assert sum(answered.values()) > 0
        backup.stop(sig=9)  # no drain: in-flight calls break, new ones are refused
        time.sleep(2.5)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert errors == []
    assert metric(world.sidecar.metrics(), "vsr_extproc_upstream_calls_total", member="backup") > 0
    after_kill = sum(answered.values())
    # Requests still flow, all to full, with backup marked down.
    for _ in range(5):
        reply = world.post("v50", "/v1/systemone", {"model": "ha", "state": STATE, "questions": {"urgent": NOUL}})
        assert (reply.status, reply.headers["x-vsr-member"]) == (200, "full")
    down = world.sidecar.status()["workers"][0]["members"]["backup"]["down"]
    assert down and after_kill > 0
    # Bring it back on the same port: the sidecar notices and routes to it again.
    revived = Runtime(backup.folder, backup.log, port=backup.port).start().wait()
    world.runtimes["backup"] = revived

    def back() -> bool:
        return world.sidecar.status()["workers"][0]["members"]["backup"]["down"] is None

    from tests.e2e.envoy_proc import wait_for

    wait_for(
        lambda: (
            world.post("v50", "/v1/systemone", {"model": "ha", "state": STATE, "questions": {"urgent": NOUL}}),
            back(),
        )[1],
        timeout=30,
        interval=0.2,
        what="backup to be routed to again",
    )


def test_a_standard_targets_errors_are_read_and_re_encoded_for_the_client(world: World) -> None:
    """A 0.2 target's 422 ``detail[]`` comes back located, a 429's ``Retry-After`` kept, and a
    busy member is left for another able one."""
    unanswerable = world.post(
        "v50",
        "/v1/systemone",
        {"model": "jev-1.13.0", "state": STATE, "questions": {"dog": {"type": "box", "instructions": "the dog"}}},
    )
    assert unanswerable.status == 422, unanswerable.body
    body = unanswerable.json()
    assert (
        body["detail"][0]["loc"][:3] == ["body", "questions", "dog"]
        and body["detail"][0]["type"] == "union_tag_invalid"
    )
    busy = world.post("v50", "/v1/systemone", {"model": "mock", "state": STATE, "questions": {"urgent": NOUL}})
    assert busy.status == 429 and busy.headers["retry-after"] == "0"
    assert busy.json()["detail"]["error_type"] == "rate_limit_error"
    for _ in range(4):  # whichever goes first, `standard` answers
        reply = world.post(
            "v50", "/v1/systemone", {"model": "busy-first", "state": STATE, "questions": {"urgent": NOUL}}
        )
        assert reply.status == 200 and reply.json()["model"] == "tiny-std", reply.body
