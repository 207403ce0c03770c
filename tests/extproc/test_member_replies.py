"""What the client gets when a member answers with something that is not a reply.

The sidecar reads a member's /v1/decisions reply to write the client's answer. A member that
sends JSON of the wrong shape (or no JSON) is the member's fault: the client gets 502
``invalid_model_output`` in its listener's error shape, never the sidecar's own 500. These run
the sidecar's reading and re-encoding in process, with the member's card set by hand (no
network is needed to read a reply).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sr_control.card import Card, Limits
from sr_control.extproc.auth import KeyRing
from sr_control.extproc.call import Call
from sr_control.extproc.cards import CardBook, CardState
from sr_control.extproc.envoy import Answer, Forward
from sr_control.extproc.incoming import Incoming, Sidecar
from sr_control.extproc.metrics import Metrics
from sr_control.extproc.pool import Pool
from sr_control.extproc.settings import SidecarSettings
from sr_control.extproc.systemone_path import SystemOne
from sr_control.extproc.upstream import Http
from sr_control.extproc.versions import VersionStore
from tests.extproc.test_pieces import data_of

CONFIG = """
version: 2
deployments:
  d3: {provider: systemone, endpoint: "http://127.0.0.1:9/v1/systemone", model: d3, schema: vllm-sr/5.0}
listeners:
  - {name: edge, port: 8801, apis: {systemone: {models: [d3]}}}
"""
REQUEST = json.dumps(
    {
        "model": "d3",
        "state": "The export button fails with a 500.",
        "questions": {
            "urgent": {"type": "noul", "instructions": "Is it urgent?"},
            "team": {
                "type": "choice",
                "instructions": "Which team?",
                "criteria": {"billing": None, "engineering": None},
            },
        },
    }
).encode()
GOOD = (
    b'{"model": "d3", "answers": {"urgent": {"type": "noul", "noul": 0.9}, "team": {"type": "choice", '
    b'"choice": "engineering", "probabilities": {"billing": 0.1, "engineering": 0.9}, "confidence": 0.8}}, '
    b'"usage": {"input_tokens": 20, "output_tokens": 0}}'
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["model", "answers", "usage", "urgent", "team", "type", "noul", "choice", "responses"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def sidecar(config: str = CONFIG, forwarding: str = "envoy") -> tuple[SystemOne, Incoming]:
    data = data_of(config, "edge")
    http = Http()
    cards = CardBook(http)
    member = data.members["d3"]
    card = Card(
        frozenset({"noul", "choice", "score"}),
        frozenset({"text"}),
        limits=Limits(255, None, 2, 10, 16384),
        contract="5.0.0",
    )
    cards._states[cards._key(member)] = CardState(card, fetched_at=time.monotonic() + 1e9)  # as if just fetched
    side = Sidecar(
        SidecarSettings(forwarding=forwarding), VersionStore(), cards, Pool(cards), http, KeyRing(), Metrics()
    )  # type: ignore[arg-type]
    incoming = Incoming(
        "edge", "systemone", data, "POST", "/v1/systemone", {"content-type": "application/json"}, "req-1"
    )
    return SystemOne(side), incoming


def forwarded(systemone: SystemOne, incoming: Incoming) -> Call:
    _, call = asyncio.run(systemone.request(incoming, REQUEST))
    assert call is not None and call.member is not None
    systemone.sidecar.pool.end(call.member)
    return call


SYSTEMONE, INCOMING = sidecar()


def test_a_good_reply_is_the_clients_200() -> None:
    answer = SYSTEMONE.response_body(forwarded(SYSTEMONE, INCOMING), 200, {}, GOOD)
    assert answer.status == 200 and json.loads(answer.body)["answers"]["team"]["choice"] == "engineering"


def test_text_that_is_not_json_is_a_502() -> None:
    answer = SYSTEMONE.response_body(forwarded(SYSTEMONE, INCOMING), 200, {}, b"<html>bad gateway</html>")
    assert answer.status == 502
    assert json.loads(answer.body)["detail"]["error_type"] == "upstream_error"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reply=json_values)
def test_any_json_a_member_sends_is_answered_never_the_sidecars_500(reply: Any) -> None:
    """A 200 only for a reply that is one; otherwise 502, or the standard's 500 question_failed
    when the reply is readable but lacks a question's answer."""
    call = forwarded(SYSTEMONE, INCOMING)
    answer = SYSTEMONE.response_body(call, 200, {}, json.dumps(reply).encode())
    body = json.loads(answer.body)
    assert answer.status in (200, 500, 502), (answer.status, body)
    if answer.status == 500:
        assert body["code"] == "question_failed", body
    if answer.status != 200:
        assert body["detail"]["error_type"] in ("upstream_error", "unknown")


def test_the_sidecars_own_call_sends_a_whole_reply_on_as_it_came_and_reads_any_other() -> None:
    """With ``--forwarding sidecar`` the sidecar calls the member itself. A reply the member calls
    whole (``x-vsr-reply: whole``) is the client's answer byte for byte, so its own bytes (here,
    compact JSON) go back unread; the same reply without that word is read and written anew (in
    json.dumps' layout). A batch is always written anew, in the batch's own shape."""
    compact = json.dumps(json.loads(GOOD), separators=(",", ":")).encode()

    async def main() -> list[bytes]:
        replies = [True, False]

        async def member(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while not reader.at_eof():
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return  # the sidecar closed its connection
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                asked = json.loads(await reader.readexactly(length))
                # Said of every reply, a batch's too: the sidecar must not take a batch's on trust.
                whole = b"x-vsr-reply: whole\r\n" if (replies.pop(0) if replies else True) else b""
                body = (
                    compact
                    if "requests" not in asked
                    else b'{"model":"d3","responses":{"a":%s},"usage":{"input_tokens":20,"output_tokens":0}}' % compact
                )
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n%s"
                    % (whole, len(body), body)
                )

        server = await asyncio.start_server(member, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        systemone, incoming = sidecar(CONFIG.replace("127.0.0.1:9", f"127.0.0.1:{port}"), forwarding="sidecar")
        try:
            bodies = []
            for body in (REQUEST, REQUEST):
                answer, _ = await systemone.request(incoming, body)
                assert answer.status == 200  # type: ignore[union-attr]
                bodies.append(answer.body)  # type: ignore[union-attr]
            batch = json.dumps({"model": "d3", "requests": {"a": json.loads(REQUEST)}}).encode()
            answer, _ = await systemone.request(replace(incoming, path="/v1/systemone/batch"), batch)
            bodies.append(answer.body)  # type: ignore[union-attr]
            return bodies
        finally:
            await systemone.sidecar.http.close()
            server.close()
            await server.wait_closed()

    unread, read, batch = asyncio.run(main())
    assert unread == compact
    assert read == json.dumps(json.loads(GOOD)).encode()
    assert (
        batch
        == json.dumps(
            {"model": "d3", "responses": {"a": json.loads(GOOD)}, "usage": {"input_tokens": 20, "output_tokens": 0}}
        ).encode()
    )


def test_auto_forwarding_leaves_a_service_to_envoy_and_calls_a_member_of_one_host_itself() -> None:
    """``--forwarding auto``: a Service-backed deployment (its pods balanced by Envoy over EDS) is
    named to Envoy as its cluster; a deployment of one endpoint the sidecar calls itself (here
    nothing listens there, so the client gets 503 ``member_unreachable`` from that very call)."""
    service = CONFIG.replace(
        'endpoint: "http://127.0.0.1:9/v1/systemone"', "service: {name: d3-gpu, namespace: ml, port: 8100}"
    )
    outcomes = {}
    for name, config in (("service", service), ("one host", CONFIG)):
        systemone, incoming = sidecar(config, forwarding="auto")
        out, _ = asyncio.run(systemone.request(incoming, REQUEST))
        outcomes[name] = out
    assert isinstance(outcomes["service"], Forward) and outcomes["service"].cluster == "deployment/d3"
    assert isinstance(outcomes["one host"], Answer) and outcomes["one host"].status == 503
    assert json.loads(outcomes["one host"].body)["reason"] == "member_unreachable"
