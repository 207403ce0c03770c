"""ListenerCodec: the server side of a schema. No I/O: bytes in, bytes out.

    codec = LISTENERS["vllm-sr/4.0"]
    req = codec.read("/v1/systemone", body, headers)    # -> ClientRequest, or raises ProtocolError
    forward req.upstream_body(member_model) to req.plan.path upstream (req.plan.body when the
    request names no other model), then:
    codec.answer_success(req, upstream_body)            # -> bytes; raises QuestionFailed on
                                                        #    /v1/systemone when a question failed
    codec.answer_error(exc, req)                        # -> HttpAnswer (status, headers, body)
    codec.answer_listing(listing)                       # -> bytes

Every upstream hop inside a deployment speaks the internal form on /v1/decisions, so
``answer_success`` reads the decisions reply (per-question errors in a 200) and writes what the
client's endpoint promises. The plan (seed 000): *passthrough* forwards the client's own bytes
when the internal form reads them as the listener did (every 4.0 request on a 4.0 listener,
/v1/decisions everywhere); *convert* writes the IR in the internal form (5.0 listeners, the batch
endpoint, a request with the long-context header).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from systemone.errors import ErrorInfo, NotServed, ProtocolError
from systemone.ir import Batch, Endpoint, Listing, Reply, Request
from systemone.jsontext import dumpb, dumpb_content
from systemone.reading import READINGS, Reading, read_body
from systemone.replies import (
    Flavour,
    HttpAnswer,
    decode_error,
    decode_listing,
    decode_reply,
    error_doc,
    error_headers,
    listing_doc,
    reply_as_sent,
    reply_doc,
    takes_whole,
)
from systemone.writing import internal_body, renames

LONG_CONTEXT_HEADER = "typesafe-danger-zone-long-context"
UPSTREAM_PATH = "/v1/decisions"
PATHS: Mapping[str, Endpoint] = {
    "/v1/systemone": "systemone",
    "/v1/systemone/batch": "batch",
    "/v1/decisions": "decisions",
}
LISTING_PATH = "/v1/models"
Headers = Mapping[str, str] | Iterable[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class ListenerPlan:
    kind: Literal["passthrough", "convert"]
    path: str  # where the internal form goes upstream
    body: bytes  # the client's bytes (passthrough) or the internal form (convert)


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """A request as a listener read it: the IR, its plan and the 4.0-only forms it used."""

    schema: str
    endpoint: Endpoint
    path: str
    ir: Request | Batch
    plan: ListenerPlan
    legacy_forms: tuple[str, ...] = ()

    def upstream_body(self, model: str | None = None) -> bytes:
        """The body for ``plan.path`` upstream, with ``model`` (the pool member's model name) in
        place of every model name the client gave (``vllm-sr/auto``). When that changes nothing
        it is ``plan.body``; else the internal form of the IR naming it (``internal_body``).
        """
        if model is None or not renames(self.ir, model):
            return self.plan.body
        return internal_body(self.ir, model)


@dataclass(frozen=True, slots=True)
class ListenerCodec:
    schema: str
    readings: Mapping[Endpoint, Reading]
    flavour: Flavour
    passthrough: frozenset[Endpoint]  # endpoints whose requests go on as the client's bytes

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(p for p, e in PATHS.items() if e in self.readings)

    def endpoint(self, path: str) -> Endpoint:
        endpoint = PATHS.get(path.split("?", 1)[0].rstrip("/") or "/")
        if endpoint is None or endpoint not in self.readings:
            raise NotServed(
                f"{self.schema} serves no {path} (it serves {', '.join(self.paths)} and GET {LISTING_PATH})"
            )
        return endpoint

    def read(self, path: str, body: bytes, headers: Headers = ()) -> ClientRequest:
        """Decode and check a client request; raise the ProtocolError a client must see."""
        endpoint = self.endpoint(path)
        ir, forms = read_body(body, self.readings[endpoint], endpoint)
        if _long_context(headers):
            ir = _with_long_context(ir)
        if endpoint in self.passthrough and not _long_context(headers):
            plan = ListenerPlan("passthrough", UPSTREAM_PATH, bytes(body))
        else:
            plan = ListenerPlan("convert", UPSTREAM_PATH, internal_body(ir))
        return ClientRequest(self.schema, endpoint, path, ir, plan, forms)

    def answer_success(self, req: ClientRequest, reply: bytes | Reply) -> bytes:
        """The client's 200 body from an upstream's decisions reply (or a reassembled Reply)."""
        if isinstance(reply, Reply):  # a runtime's own answers: Python floats, which dumpb writes
            return dumpb(reply_doc(reply, req.ir, req.endpoint, self.flavour))
        as_sent = reply_as_sent(reply, req.ir, req.endpoint, self.flavour)
        if as_sent is not None:
            return as_sent
        return dumpb_content(reply_doc(decode_reply(reply, req.ir), req.ir, req.endpoint, self.flavour))

    def takes_whole(self, req: ClientRequest) -> bool:
        """A whole decisions reply (``x-vsr-reply: whole``) is the answer to ``req`` as it is."""
        return takes_whole(req.ir, self.flavour)

    def answer_error(self, error: ProtocolError | ErrorInfo, req: ClientRequest | None = None) -> HttpAnswer:
        info = error.info if isinstance(error, ProtocolError) else error
        states = req is not None and isinstance(req.ir, Batch) and req.ir.form == "states"
        return HttpAnswer(info.status, error_headers(info), dumpb(error_doc(info, self.flavour, states)))

    def answer_upstream_error(
        self, req: ClientRequest | None, status: int, headers: Headers, body: bytes
    ) -> HttpAnswer:
        """An upstream's error reply, re-encoded in this listener's form."""
        return self.answer_error(decode_error(status, headers, body), req)

    def answer_listing(self, listing: bytes | Listing) -> bytes:
        if not isinstance(listing, Listing):
            listing = decode_listing(200, listing)
        return dumpb(listing_doc(listing, self.flavour))


def _long_context(headers: Headers) -> bool:
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return any(k.lower() == LONG_CONTEXT_HEADER and v.strip().lower() == "true" for k, v in pairs)


def _with_long_context(ir: Request | Batch) -> Request | Batch:
    return replace(ir, long_context=True)


def _codecs() -> dict[str, ListenerCodec]:
    r = READINGS
    return {
        "vllm-sr/5.0": ListenerCodec(
            "vllm-sr/5.0",
            {"systemone": r["vllm-sr/5.0"], "batch": r["vllm-sr/5.0"], "decisions": r["internal"]},
            "vllm-sr",
            frozenset({"decisions"}),
        ),
        "vllm-sr/4.0": ListenerCodec(
            "vllm-sr/4.0",
            {"systemone": r["vllm-sr/4.0"], "batch": r["vllm-sr/4.0"], "decisions": r["internal"]},
            "legacy",
            frozenset({"systemone", "decisions"}),
        ),
        # The bare standard, for a runtime serving strict systemone/0.2: one endpoint, no extensions.
        "systemone/0.2": ListenerCodec("systemone/0.2", {"systemone": r["systemone/0.2"]}, "standard", frozenset()),
    }


LISTENERS: Mapping[str, ListenerCodec] = _codecs()
