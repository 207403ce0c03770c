"""Step 1 of a System One request's path (systemone_path.py): read the body in the listener's schema.

    read(incoming, body, metrics) -> Call | Answer

The listener's codec reads a JSON body, or the official SDK's multipart form by its ``request``
part with every part-borne asset written inline (body.py): the IR, and the plan (passthrough:
the client's bytes; convert: the internal form). The request's deadline is the client's, capped
by the listener's. A bad request is answered here, in the listener's error form (never a 5xx).

Next: choose (choose.py). The Decide path (a later issue) slots its own step in between, in a
module of its own (decide.py): it builds one System One request from an LLM request and
rewrites the model, and hands choose the same ``Call`` this step makes.
"""

from __future__ import annotations

from dataclasses import replace

from sr_control.compiler.limits import DEFAULT_DEADLINE_MS
from sr_control.extproc import body as body_parts
from sr_control.extproc.answer import error_answer
from sr_control.extproc.call import Call
from sr_control.extproc.data import Offer
from sr_control.extproc.envoy import Answer
from sr_control.extproc.incoming import Incoming
from sr_control.extproc.metrics import Metrics
from systemone import ClientRequest, ListenerCodec, ProtocolError
from systemone.listener import LISTENERS
from systemone.writing import internal_body


def listener_codec(offer: Offer | None) -> ListenerCodec:
    """The codec of a listener's System One schema (vllm-sr/5.0 where it offers none)."""
    return LISTENERS[(offer.schema if offer is not None else None) or "vllm-sr/5.0"]


def read(incoming: Incoming, body: bytes, metrics: Metrics) -> Call | Answer:
    """``body`` as the listener's codec reads it, with the 4.0-only forms it used counted; or
    the client's error answer."""
    offer = incoming.data.systemone
    codec = listener_codec(offer)
    if offer is None:
        return error_answer(
            codec,
            ProtocolError(
                f"listener {incoming.listener!r} does not offer System One",
                status=404,
                code="not_found",
                error_type="not_found",
            ),
        )
    req: ClientRequest | None = None
    try:
        multipart = body_parts.read(body, incoming.headers.get("content-type", ""))
        req = codec.read(incoming.path, multipart[0] if multipart else body, incoming.headers.items())
        if multipart:
            # The client's bytes are a form, not JSON: the member gets the internal form, written
            # from the IR with every part inline (the plan's was written before, naming parts).
            ir = body_parts.inline_parts(req.ir, multipart[1])
            req = replace(req, ir=ir, plan=replace(req.plan, kind="convert", body=internal_body(ir)))
    except ProtocolError as exc:
        return error_answer(codec, exc, req)
    for form in req.legacy_forms:
        metrics.diagnostics.labels(incoming.listener, form).inc()
    deadline_ms = request_deadline_ms(req.ir.deadline_ms, offer.max_deadline_ms)
    return Call(incoming, codec, req, deadline_ms, sent=b"" if multipart else body)


def request_deadline_ms(asked: int | None, listener_max: int | None) -> int:
    """Every request's deadline: the client's ``options.deadline_ms`` capped by the listener's
    ``max_deadline_ms`` (compiled into the sidecar's data; the compiler's default where absent)."""
    cap = listener_max if listener_max is not None else DEFAULT_DEADLINE_MS
    return cap if asked is None else min(asked, cap)


__all__ = ["listener_codec", "read", "request_deadline_ms"]
