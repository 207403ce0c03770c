"""Deadlines end work everywhere (issue 22): through Envoy, the sidecar and ``vllm-srun serve
default``, a 200-state batch gets the listener's JSON 504 ``deadline_exceeded`` at its deadline,
the runtime drops the rest of its work, and the next request is answered at once.

Both ways a request reaches the member: the sidecar calling it (``--forwarding auto``, one host)
and Envoy forwarding to it (``--forwarding envoy``).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.envoy_proc import wait_for
from tests.extproc.harness import Runtime, get_text, metric
from tests.reliability.front import batch, front
from tests.reliability.parts import ASK, post

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    """``vllm-srun serve default``: the model `vllm-sr serve` runs. A 200-state batch of states four
    times the seed's example takes it some 40 s on two cores (0.2 s a state), far longer than the
    deadlines here, even were it several times faster."""
    runtime = Runtime(Path("default"), tmp_path_factory.mktemp("default") / "runtime.log").start()
    try:
        yield runtime.wait()
    finally:
        runtime.stop()


def dropped(runtime: Runtime) -> float:
    return metric(get_text(f"{runtime.url}/metrics"), "vsr_runtime_dropped_requests_total")


@pytest.mark.parametrize("forwarding", ["auto", "envoy"])
@pytest.mark.parametrize(
    ("options", "deadline_ms"), [({}, 2000), ({"deadline_ms": 1000}, 1000), ({"deadline_ms": 60000}, 2000)]
)
def test_a_batch_past_its_deadline_gets_the_json_504_and_the_next_request_is_answered_at_once(
    default: Runtime, tmp_path: Path, forwarding: str, options: dict[str, int], deadline_ms: int
) -> None:
    """The deadline is the client's options.deadline_ms capped by the listener's max_deadline_ms
    (2000 ms here), and without one the listener's: every request has one."""
    with front(tmp_path, default.url, forwarding=forwarding, max_deadline_ms=2000) as port:
        expected = json.loads(post(port, ASK).body)
        before = dropped(default)

        late = post(port, batch(200, repeat=4, **options), path="/v1/systemone/batch")
        assert late.status == 504, late.body
        assert late.headers["content-type"] == "application/json"
        error = json.loads(late.body)  # the listener's (vllm-sr/5.0) error form, never Envoy's empty 504
        # The reason is the same either way; the code is the sidecar's (deadline_exceeded) or the
        # runtime's (question_failed, seed 002's table) depending on who answered first.
        assert error["reason"] == "deadline_exceeded" and error["detail"]["error_type"] == "timeout", error
        if forwarding == "auto":  # the sidecar's own answer
            assert f"deadline of {deadline_ms} ms" in error["detail"]["message"], error
        else:  # the runtime's, re-encoded: the sidecar told it what was left (x-vsr-deadline-ms)
            assert "left when the router sent it here" in error["detail"]["message"], error

        sent = time.monotonic()
        answer = post(port, ASK)
        answered_s = time.monotonic() - sent
        assert answer.status == 200 and json.loads(answer.body) == expected
        assert answered_s < 1.0  # the bound: the abandoned batch holds nobody

        # The runtime stopped the batch's work: most of its 200 requests never ran, none waits.
        text = get_text(f"{default.url}/metrics")
        assert metric(text, "vsr_runtime_dropped_requests_total") - before > 100
        assert metric(text, "vsr_runtime_queue_depth") == 0


@pytest.fixture(scope="module")
def tight(default: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A listener in front of ``default`` whose System One deadline is 1 s."""
    with front(tmp_path_factory.mktemp("tight"), default.url, max_deadline_ms=1000) as port:
        yield port


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    states=st.integers(1, 40),
    repeat=st.integers(1, 4),
    deadline_ms=st.one_of(st.none(), st.integers(1, 2500)),
    path=st.sampled_from(["/v1/systemone/batch", "/v1/systemone"]),
)
def test_no_answer_is_empty_whatever_the_size_and_the_deadline(
    tight: int, states: int, repeat: int, deadline_ms: int | None, path: str
) -> None:
    """Every answer is JSON in the listener's form with a documented status, never Envoy's empty 504."""
    options = {} if deadline_ms is None else {"deadline_ms": deadline_ms}
    doc = batch(states, repeat=repeat, **options)
    if path == "/v1/systemone":  # one request: the batch's states as one long state
        doc = {
            "state": " ".join(r["state"] for r in doc["requests"].values()),
            "questions": ASK["questions"],
            **({"options": options} if options else {}),
        }
    reply = post(tight, doc, path=path)
    assert reply.headers.get("content-type") == "application/json" and reply.body, (reply.status, reply.body)
    answer = json.loads(reply.body)
    assert reply.status in (200, 400, 504), answer  # docs/runtime/server.md's table, for a valid request
    if reply.status != 200:
        assert answer["reason"] == ("deadline_exceeded" if reply.status == 504 else "max_length_exceeded"), answer
    else:
        responses = answer["responses"].values() if path.endswith("batch") else [answer]
        assert all(0 <= r["answers"]["urgent"]["noul"] <= 1 for r in responses), answer


def test_a_client_that_goes_away_ends_its_batchs_work(default: Runtime) -> None:
    """Straight to the runtime, no deadline: the client closes its connection while its batch
    runs, and the runtime drops what it had not run and frees the queue."""
    before = metric(get_text(f"{default.url}/metrics"), "vsr_runtime_dropped_requests_total", why="client_closed")
    body = json.dumps(batch(200, repeat=4)).encode()
    with socket.create_connection(("127.0.0.1", default.port)) as conn:
        conn.sendall(
            b"POST /v1/systemone/batch HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        # Slices of it are running: the batch waits for more of the engine.
        wait_for(
            lambda: metric(get_text(f"{default.url}/metrics"), "vsr_runtime_queue_depth") == 1,
            timeout=30,
            what="the batch to run",
        )
    wait_for(
        lambda: (
            metric(get_text(f"{default.url}/metrics"), "vsr_runtime_dropped_requests_total", why="client_closed")
            > before
        ),
        timeout=10,
        what="the batch to be dropped",
    )
    text = get_text(f"{default.url}/metrics")
    assert metric(text, "vsr_runtime_dropped_requests_total", why="client_closed") - before > 100
    assert metric(text, "vsr_runtime_queue_depth") == 0


def test_a_request_waiting_for_a_free_call_to_the_member_ends_at_its_own_deadline(
    default: Runtime, tmp_path: Path
) -> None:
    """``max_concurrency: 1`` and a batch holding that one call: the next request waits its turn
    in the sidecar only until its own deadline, then gets the JSON 504 saying why."""
    with front(tmp_path, default.url, max_deadline_ms=3000, max_concurrency=1) as port, ThreadPoolExecutor(1) as pool:
        big = pool.submit(post, port, batch(200, repeat=4), "/v1/systemone/batch")
        wait_for(
            lambda: metric(get_text(f"{default.url}/metrics"), "vsr_runtime_queue_depth") == 1,
            timeout=30,
            what="the batch to run",
        )
        waited = post(port, {**ASK, "options": {"deadline_ms": 500}})
        assert waited.status == 504 and waited.headers["content-type"] == "application/json"
        error = json.loads(waited.body)
        assert (
            error["reason"] == "deadline_exceeded" and "no free call (max_concurrency 1)" in error["detail"]["message"]
        ), error
        assert big.result(30).status == 504
