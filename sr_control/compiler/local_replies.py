"""Envoy's own answers in the listener's error form: the HTTP connection manager's
``local_reply_config``.

Envoy answers some requests itself, before or instead of the sidecar and the member: a body
over the buffer (413), headers over 60 KiB (431), no healthy host (503), a timeout (504), the
sidecar unreachable (500), a request that is not valid HTTP (400). Left alone these are
``text/plain`` ("Payload Too Large") or empty; each mapper here puts the listener schema's JSON
error body in their place, with the ``code`` a client of that schema reads (the same body the
sidecar would write, from ``systemone``), so a client parses every error one way.

Which replies are Envoy's own: those whose headers have no ``content-type`` yet when the mapper
runs. The sidecar's immediate answers and the route table's ``direct_response`` 404/405s carry
``application/json`` by then (Envoy applies their headers before the mappers), so they keep
their own, more precise bodies. Measured against Envoy 1.40: a CEL filter sees those headers,
and each reply below was produced and mapped (tests/e2e/test_local_replies.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sr_control.compiler.limits import BODY_LIMIT
from sr_control.compiler.offer import ListenerOffer
from sr_control.compiler.templates import fill
from systemone.errors import ErrorInfo
from systemone.listener import LISTENERS

# Envoy's default max_request_headers_kb: request headers over it are answered 431.
HEADERS_LIMIT = 60 * 1024


# Every status Envoy answers with itself, and what the client is told. ``message`` is what
# happened as the client can act on it; Envoy's access log line (``details``) says exactly why.
ENVOY_REPLIES: tuple[ErrorInfo, ...] = (
    ErrorInfo(
        400,
        "invalid_request",
        "the request is not valid HTTP (Envoy could not read it)",
        "api_usage_error",
        reason="malformed_http",
    ),
    ErrorInfo(404, "not_found", "no route of this listener serves this request", "not_found"),
    ErrorInfo(405, "method_not_allowed", "this path does not take this method", "api_usage_error"),
    ErrorInfo(
        408,
        "deadline_exceeded",
        "the request was not received in time (the client sent it too slowly)",
        "timeout",
        reason="request_timeout",
    ),
    ErrorInfo(
        413,
        "request_too_large",
        f"the request body is over the {BODY_LIMIT // (1024 * 1024)} MiB limit",
        "api_usage_error",
        limit=BODY_LIMIT,
    ),
    ErrorInfo(
        431,
        "request_too_large",
        f"the request headers are over the {HEADERS_LIMIT // 1024} KiB limit",
        "api_usage_error",
        reason="headers_too_large",
        limit=HEADERS_LIMIT,
    ),
    ErrorInfo(
        500,
        "internal_error",
        "the listener could not process the request (its ext_proc sidecar failed or cannot be reached)",
        "unknown",
    ),
    ErrorInfo(502, "upstream_error", "the member's answer could not be read", "unknown"),
    ErrorInfo(
        503,
        "unavailable",
        "no member can take the request now (none is up, or a connection to it failed)",
        "overloaded_error",
        retry_after=1.0,
    ),
    ErrorInfo(504, "deadline_exceeded", "no answer came within the time the listener allows", "timeout"),
)
# Any other status Envoy answers with itself (none is known to reach a client; kept so no reply
# is ever left in Envoy's text form).
OTHER = ErrorInfo(0, "proxy_error", "the listener could not pass the request on", "unknown")
STATUSES = frozenset(r.status for r in ENVOY_REPLIES)

# Envoy's own reply: an error status, and no content-type set by a route or the sidecar.
_OWN = "!('content-type' in response.headers)"


def local_reply_config(offer: ListenerOffer) -> dict[str, Any]:
    mappers = [_mapper(offer, r, f"response.code == {r.status} && {_OWN}") for r in ENVOY_REPLIES]
    mappers.append(_mapper(offer, OTHER, f"response.code >= 400 && {_OWN}"))
    return {"mappers": mappers}


def error_answer(offer: ListenerOffer, reply: ErrorInfo) -> tuple[int, tuple[tuple[str, str], ...], bytes]:
    """The status, headers and body the listener's clients get for ``reply``, as the sidecar
    writes errors for the listener's schema (a listener without System One: as vllm-sr/5.0)."""
    http = LISTENERS[offer.systemone_schema or "vllm-sr/5.0"].answer_error(reply)
    return http.status, http.headers, http.body


def _mapper(offer: ListenerOffer, reply: ErrorInfo, expression: str) -> dict[str, Any]:
    _, headers, body = error_answer(offer, reply if reply.status else replace(reply, status=500))
    return fill(
        "listener/local_reply_mapper",
        expression=expression,
        body=body.decode(),
        headers=[
            {"header": {"key": k, "value": v}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
            for k, v in headers
            if k != "content-type"
        ]
        or None,
    )


__all__ = ["ENVOY_REPLIES", "HEADERS_LIMIT", "OTHER", "STATUSES", "error_answer", "local_reply_config"]
