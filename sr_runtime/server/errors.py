"""The runtime server's own errors, and the one place where every error becomes an answer.

    ProtocolError (systemone)  what a listener codec writes, in the client's schema
     ├── AuthenticationFailed            401: no API key, or a wrong one (auth on)
     ├── UnknownModel                    400: a model name this server does not serve
     ├── UnsupportedEncoding             415: a Content-Encoding other than zstd
     ├── MethodNotAllowed                405: GET on a POST route
     ├── Unavailable                     503 unavailable: the model is loading (Retry-After)
     └── Overloaded                      529 overloaded: the queue is full (Retry-After)

The protocol layer's own (422 validation, 400 unknown members, 413, 404, question failures,
504 deadline) pass through unchanged. An engine ``DecisionError`` that escapes a whole request
becomes the question error of its code (seed 002's table), and anything else a 500 that is
logged: a bad request never reaches that branch, so it never gets a 5xx.
"""

from __future__ import annotations

import traceback

from sr_base.log import get_logger
from sr_runtime.errors import DecisionError
from systemone import ClientRequest, HttpAnswer, ListenerCodec, ProtocolError, QuestionFailed
from systemone.errors import QUESTION_ERROR_STATUS

log = get_logger("vllm-srun.server")
RETRY_AFTER_S = 1.0
# A client that went away before its body arrived gets nothing; its request is counted under
# nginx's "client closed request" status, not as a 500 of ours.
CLIENT_CLOSED = 499


class AuthenticationFailed(ProtocolError):
    status = 401
    code = "unauthorized"
    error_type = "authentication_error"


class UnknownModel(ProtocolError):
    """The standard's unknown-model answer: 400 ``api_usage_error``, naming what is served."""

    reason = "unknown_model"

    def __init__(self, model: str, served: str) -> None:
        super().__init__(
            f"Unknown model: {model} (this server serves {served!r}; 'jev-latest' or no model also mean it)"
        )


class UnsupportedEncoding(ProtocolError):
    status = 415
    code = "unsupported_media_type"
    reason = "content_encoding"


class MethodNotAllowed(ProtocolError):
    status = 405
    code = "method_not_allowed"
    reason = "method_not_allowed"


class Unavailable(ProtocolError):
    status = 503
    code = "unavailable"
    error_type = "overloaded_error"
    reason = "model_loading"

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message, reason=reason, retry_after=RETRY_AFTER_S)


class Overloaded(ProtocolError):
    status = 529
    code = "overloaded"
    error_type = "overloaded_error"
    reason = "queue_full"

    def __init__(self, depth: int) -> None:
        super().__init__(
            f"the server is overloaded: {depth} requests are waiting for the model", retry_after=RETRY_AFTER_S
        )


def error_answer(codec: ListenerCodec, exc: BaseException, req: ClientRequest | None = None) -> HttpAnswer:
    """The answer a client gets for ``exc``, in the listener codec's form."""
    if isinstance(exc, ProtocolError):
        return codec.answer_error(exc, req)
    if isinstance(exc, DecisionError):
        status = QUESTION_ERROR_STATUS.get(exc.code, 500)
        return codec.answer_error(QuestionFailed(str(exc), status=status, reason=exc.code), req)
    # The traceback as plain text, not exc_info: the console renderer would draw it with rich,
    # locals and all, on the event loop, and a deep recursion took it minutes, every other
    # request waiting behind it.
    log.error("internal error", error=repr(exc), exception="".join(traceback.format_exception(exc)))
    return codec.answer_error(
        ProtocolError(f"internal error: {type(exc).__name__}", status=500, code="internal_error"), req
    )
