"""A System One request's path through the sidecar, top to bottom (seed 000's "Forward" path:
the ``vllm-sr/auto`` pool and named decision models).

    read       read.py       the body in the listener's schema: the IR and a plan (a bad
                             request is answered here, in the listener's error form)
    choose     choose.py     the members of the model the request names, ranked: able to
                             answer every question and read its media (cards), then fewest
                             open calls
    call       forward.py    a vllm-sr/5.0 member Envoy balances: Envoy forwards the plan's
                             body to its cluster's /v1/decisions
               members.py    any other member: the sidecar calls it itself (a systemone/0.2
                             member: the standard calls, split and reassembled)
    fail over  failover.py   a member that fails (5xx, 429, 529, no connection) is replaced by
                             the next capable one while the deadline allows, the sidecar
                             making that call itself
    answer     answer.py     the member's reply re-encoded for the client's schema

``Call`` (call.py) is the request in flight that the steps hand on. The ext_proc servicer
(processor.py) calls the three entries below in the order Envoy's messages come. When the
config traces, each step is a span under the request's (sr_base/tracing.py).
"""

from __future__ import annotations

from sr_base.tracing import step
from sr_control.extproc.answer import error_answer, reencode
from sr_control.extproc.call import Call
from sr_control.extproc.choose import choose
from sr_control.extproc.envoy import Answer, Forward
from sr_control.extproc.failover import call_in_turn, next_members
from sr_control.extproc.forward import envoy_forwards, through_envoy
from sr_control.extproc.incoming import Incoming, Sidecar
from sr_control.extproc.read import read
from systemone import ProtocolError


class SystemOne:
    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar

    async def request(self, incoming: Incoming, body: bytes) -> tuple[Forward | Answer, Call | None]:
        """The request body: read, choose, then Envoy forwards it (a ``Forward``) or the sidecar
        calls the members and answers (an ``Answer``). The ``Call`` is None when the request
        was answered before any member was chosen."""
        sidecar = self.sidecar
        with step("read"):
            call = read(incoming, body, sidecar.metrics)
        if isinstance(call, Answer):
            return call, None
        with step("choose") as span:
            try:
                call.ranking = await choose(sidecar.pool, incoming, call.req.ir, len(body))
            except ProtocolError as exc:
                return error_answer(call.codec, exc, call.req), None
            if span is not None:
                # The model (a pool, or a model name) the request resolved to, and its members in
                # the order they would be called.
                span.set_attributes(
                    {"vllm_sr.model": call.ranking.model, "vllm_sr.capable": [m.name for m in call.ranking.capable]}
                )
        first = call.ranking.capable[0]
        if first.schema == "vllm-sr/5.0" and envoy_forwards(sidecar.settings.forwarding, first):
            with step("forward", **{"vllm_sr.member": first.name}):
                return through_envoy(sidecar, call, first), call
        return await call_in_turn(sidecar, call, call.ranking.capable), call

    async def response_headers(
        self, call: Call, status: int, headers: dict[str, str], end_of_stream: bool
    ) -> Answer | None:
        """The member Envoy forwarded to answered ``status``: fail over, answer now (a reply
        without a body), or None to go on to the body."""
        others = next_members(self.sidecar, call, status)
        if others:
            return await call_in_turn(self.sidecar, call, others)
        if end_of_stream:
            return reencode(call, status, headers, b"")
        return None

    def response_body(self, call: Call, status: int, headers: dict[str, str], body: bytes) -> Answer:
        """The member's reply (``status``, ``headers``, ``body``) as the client's answer."""
        with step("answer"):
            return reencode(call, status, headers, body)


__all__ = ["SystemOne"]
