"""What a client gets through a listener whatever it sends, and what the sidecar counts of it
(issue 22): every error in the listener's JSON form with a status the docs list, never an empty
body, and every response Envoy sent counted, those Envoy answered itself included."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.e2e.envoy_proc import wait_for
from tests.e2e.http_client import Reply, request
from tests.e2e.test_local_replies import _big_body
from tests.extproc.harness import World, metric

pytestmark = pytest.mark.envoy

STATE = "Our export button fails with a 500 since this morning. Open a ticket."
NOUL = {"type": "noul", "instructions": "Does the user report a problem that blocks their work?"}
ERRORS_DOC = ROOT / "docs" / "systemone" / "errors.md"


def documented_statuses() -> set[int]:
    """Every status docs/systemone/errors.md lists in a table (a `| 413 |` cell), and 200."""
    return {200} | {int(s) for s in re.findall(r"^\|(?:[^|\n]*\|)?\s*(\d{3})\s*\|", ERRORS_DOC.read_text(), re.M)}


def _responses(world: World, **labels: str) -> float:
    return metric(world.sidecar.metrics(), "vsr_listener_responses_total", **labels)


def test_every_response_envoy_sent_is_counted_by_who_answered(world: World) -> None:
    before = {
        "ok": _responses(world, listener="v50", status="200"),
        "405": _responses(world, listener="v50", status="405", by="route"),
        "431": _responses(world, listener="v50", status="431", by="envoy", details="http1.headers_too_large"),
        "413": _responses(world, listener="v40", status="413", by="envoy", details="request_payload_too_large"),
    }
    assert (
        world.post("v50", "/v1/systemone", {"model": "tiny", "state": STATE, "questions": {"urgent": NOUL}}).status
        == 200
    )
    assert request(world.listeners["v50"], "GET", "/v1/systemone").status == 405
    assert world.post("v50", "/v1/systemone", {}, **{"x-big": "a" * 100_000}).status == 431
    assert _big_body(world.listeners["v40"], 40 * 1024 * 1024).status == 413
    # None of the last three reached the sidecar's handler; Envoy's access log reaches it
    # within about a second (the log's flush interval).
    wait_for(
        lambda: (
            _responses(world, listener="v50", status="200") > before["ok"]
            and _responses(world, listener="v50", status="405", by="route") > before["405"]
            and _responses(world, listener="v50", status="431", by="envoy", details="http1.headers_too_large")
            > before["431"]
            and _responses(world, listener="v40", status="413", by="envoy", details="request_payload_too_large")
            > before["413"]
        ),
        timeout=15,
        what="the access log entries counted",
    )


def test_get_on_system_one_is_405_allowing_post_on_both_listener_schemas(world: World) -> None:
    for listener, legacy in (("v50", False), ("v40", True)):
        reply = request(world.listeners[listener], "GET", "/v1/systemone")
        assert reply.status == 405 and reply.headers["allow"] == "POST"
        body = reply.json()
        assert body["code"] == "method_not_allowed" and "POST" in body["detail"]["message"]
        assert ("error" in body) == legacy


def _check(reply: Reply) -> None:
    assert reply.body, f"an empty body with status {reply.status}"
    assert reply.status in documented_statuses(), (reply.status, reply.body[:300])
    body = json.loads(reply.body)
    if reply.status != 200:
        assert body["code"] and body["detail"], body


# Sizes: from an empty body to one over Envoy's buffer; deadlines: none, passed at once, short, long.
_states = st.integers(min_value=1, max_value=24)
_padding = st.sampled_from([0, 10, 2_000, 200_000])
_deadline = st.sampled_from([None, 1, 20, 300, 5_000])


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    listener=st.sampled_from(["v50", "v40"]), states=_states, padding=_padding, deadline=_deadline, batch=st.booleans()
)
def test_no_response_is_empty_bodied_and_every_status_is_documented(
    world: World, listener: str, states: int, padding: int, deadline: int | None, batch: bool
) -> None:
    options = {} if deadline is None else {"options": {"deadline_ms": deadline}}
    one = {"model": "tiny", "questions": {"urgent": NOUL}, **options}
    if batch:
        body = {"requests": {f"r{i}": {**one, "state": f"{STATE} {'x' * padding} ({i})"} for i in range(states)}}
        reply = world.post(listener, "/v1/systemone/batch", body)
    else:
        reply = world.post(listener, "/v1/systemone", {**one, "state": f"{STATE} {'x' * padding * states}"})
    _check(reply)


@pytest.mark.parametrize("size", [0, 100, 32 * 1024 * 1024 + 512 * 1024, 40 * 1024 * 1024])
def test_bodies_of_any_size_get_a_documented_json_answer(world: World, size: int) -> None:
    # Under the limit: not JSON (422); between 32 MiB and the buffer: the sidecar's 413; over the
    # buffer: Envoy's own 413, in the same form.
    reply = world.post("v50", "/v1/systemone", b"{" * size) if size <= 100 else _big_body(world.listeners["v50"], size)
    _check(reply)
    assert reply.status == (422 if size <= 100 else 413), (reply.status, reply.body[:200])
