"""Every response a listener sent, counted from Envoy's own access log (gRPC ALS).

The sidecar sees only the requests that reach it, and only up to the answer it gives: a request
Envoy answers itself (a body over the buffer, headers over the limit, a path no API serves), or
ends itself (its message timeout passing while the sidecar works, a member's timeout, no host
to send to), never shows in ``vsr_extproc_requests_total``. So each listener also sends every
access log entry to the sidecar (``envoy.access_loggers.http_grpc``, buffered by Envoy and
flushed about once a second), and ``vsr_listener_responses_total`` counts them by listener,
status and who answered:

    member    the member's reply came through Envoy (``via_upstream``)
    sidecar   the sidecar answered (its own error, or a member's reply it called for itself)
    route     a route answered (a path or method no API serves: 404, 405)
    envoy     Envoy answered itself; ``details`` says why (``response_timeout``,
              ``ext_proc_error_per-message_timeout_exceeded``, ``request_payload_too_large``, ...)
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import grpc
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from sr_base.log import get_logger
from sr_control.extproc.metrics import Metrics

_log = get_logger("vllm_sr.extproc")
# Envoy's details may end in a variable part ("upstream_reset_before_response_started{...}"):
# the label keeps the fixed word, so its values stay few.
_VARIABLE = re.compile(r"\{.*$")


def answered_by(details: str) -> tuple[str, str]:
    """(by, details label) for an access log entry's response code details."""
    if details == "via_upstream":
        return "member", ""
    if details == "direct_response":
        return "route", ""
    if details == "" or details.startswith("ext_proc_immediate"):
        return "sidecar", ""  # an ext_proc immediate response carries the sidecar's details (none)
    return "envoy", _VARIABLE.sub("", details)[:80]


class Outcomes(als_pb2_grpc.AccessLogServiceServicer):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def StreamAccessLogs(  # noqa: N802 - the gRPC method's name
        self,
        request_iterator: AsyncIterator[als_pb2.StreamAccessLogsMessage],
        context: grpc.aio.ServicerContext[als_pb2.StreamAccessLogsMessage, als_pb2.StreamAccessLogsResponse],
    ) -> als_pb2.StreamAccessLogsResponse:
        listener = ""
        async for message in request_iterator:
            # The identifier comes once, on a stream's first message; the log name is the listener's.
            if message.HasField("identifier"):
                listener = message.identifier.log_name
            for entry in message.http_logs.log_entry:
                by, details = answered_by(entry.response.response_code_details)
                code = entry.response.response_code.value if entry.response.HasField("response_code") else 0
                self.metrics.responses.labels(listener, str(code), by, details).inc()
                if by == "envoy" and code >= 500:
                    # A timeout or failure the sidecar's handler never saw: said here, or only
                    # Envoy's access log would say it. The path without its query (a key may be in it).
                    _log.warning(
                        "envoy answered itself",
                        listener=listener,
                        status=code,
                        details=details,
                        request_id=entry.request.request_id,
                        path=(entry.request.original_path or entry.request.path).split("?", 1)[0],
                    )
        return als_pb2.StreamAccessLogsResponse()


__all__ = ["Outcomes", "answered_by"]
