"""Every error the protocol layer raises, as one tree.

    ProtocolError                     status, code, message, flat fields, detail items
     ├── InvalidRequest               400 invalid_request: the body cannot be read as its schema
     │    └── UnknownMembers          400 invalid_request: members the schema does not define
     ├── ValidationFailed             422 invalid_request: one detail[] entry per failed field
     ├── RequestTooLarge              413 request_too_large: over the 32 MiB body limit
     ├── NotServed                    404 not_found: a path this listener does not serve
     ├── UnsupportedCapability        400 unsupported_capability: the target cannot carry it
     ├── QuestionFailed               a question the model could not answer (its own status)
     │    └── DeadlineExceeded        504 deadline_exceeded: a call missed the caller's deadline
     └── UpstreamError                an error reply from an upstream, kept as it came

A listener codec turns any of them into the error body its clients read (``replies.py``); a
server maps nothing else. Each error carries what the standard's body needs: ``status``, the
``detail`` (a list of ``DetailItem`` for 422, else ``error_type`` and ``message``) and the
vllm-sr flat fields ``code``, ``question``, ``state``, ``reason`` and ``limit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

MAX_BODY_BYTES = 32 * 1024 * 1024


# Question error codes (seed 002's table) and the status each one fails a request with.
QUESTION_ERROR_STATUS: dict[str, int] = {
    "invalid_question": 422,
    "max_length_exceeded": 400,
    "scan_budget_exceeded": 400,
    "invalid_input": 400,
    "invalid_model_output": 500,
    "unavailable": 503,
    "deadline_exceeded": 504,
}

# The standard's detail.error_type for each status it documents (system-one-standard.md §3).
ERROR_TYPE_BY_STATUS: dict[int, str] = {
    400: "api_usage_error",
    401: "authentication_error",
    403: "authentication_error",
    404: "not_found",
    413: "api_usage_error",
    422: "api_usage_error",
    429: "rate_limit_error",
    500: "unknown",
    503: "overloaded_error",
    504: "timeout",
    529: "overloaded_error",
}


@dataclass(frozen=True, slots=True)
class DetailItem:
    """One entry of a 422 ``detail`` list, FastAPI-shaped: ``loc`` starts at "body"."""

    loc: tuple[str | int, ...]
    msg: str
    type: str
    ctx: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An error as data: what every error body, in every schema, is written from."""

    status: int
    code: str
    message: str
    error_type: str
    reason: str | None = None
    question: str | None = None
    state: str | int | None = None
    limit: int | None = None
    items: tuple[DetailItem, ...] = ()
    retry_after: float | None = None  # seconds, for 429/503/529
    body: bytes | None = None  # an upstream's own body, when it came from one


class ProtocolError(Exception):
    """Base of the tree: ``info`` holds everything a body needs; ``status`` and ``code`` are its."""

    status = 400
    code = "invalid_request"
    error_type = "api_usage_error"
    reason: str | None = None

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        question: str | None = None,
        state: str | int | None = None,
        limit: int | None = None,
        items: Sequence[DetailItem] = (),
        status: int | None = None,
        code: str | None = None,
        error_type: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        status = status or self.status
        if error_type is None:  # a status other than the class's names its own error_type
            error_type = (
                self.error_type if status == type(self).status else ERROR_TYPE_BY_STATUS.get(status, self.error_type)
            )
        self.info = ErrorInfo(
            status=status,
            code=code or self.code,
            message=message,
            error_type=error_type,
            reason=reason or self.reason,
            question=question,
            state=state,
            limit=limit,
            items=tuple(items),
            retry_after=retry_after,
        )
        self.status, self.code = self.info.status, self.info.code

    @classmethod
    def from_info(cls, info: ErrorInfo) -> ProtocolError:
        err = cls.__new__(cls)
        Exception.__init__(err, info.message)
        err.info = info
        err.status, err.code = info.status, info.code
        return err

    def in_state(self, state: str | int) -> ProtocolError:
        """The same error for one item of a batch: ``state`` names the item."""
        return type(self).from_info(replace(self.info, state=state))


class InvalidRequest(ProtocolError):
    """The body cannot be read as its schema (not an object, wrong endpoint form)."""

    reason = "invalid_request"


class UnknownMembers(InvalidRequest):
    """Members the schema does not define; each is named, so nothing is silently ignored."""

    reason = "unknown_member"

    def __init__(self, paths: Sequence[str], schema: str) -> None:
        self.paths = tuple(paths)
        names = ", ".join(self.paths)
        super().__init__(f"{schema} does not define {'this member' if len(paths) == 1 else 'these members'}: {names}")


class ValidationFailed(ProtocolError):
    """Fields of the right names with the wrong shape: 422 with one detail entry per problem."""

    status = 422
    reason = "validation_failed"

    def __init__(self, items: Sequence[DetailItem], **kwargs: Any) -> None:
        lines = "; ".join(f"{loc_text(i.loc)}: {i.msg}" for i in items)
        super().__init__(lines, items=items, **kwargs)


class RequestTooLarge(ProtocolError):
    status = 413
    code = "request_too_large"
    reason = "body_too_large"

    def __init__(self, size: int, limit: int = MAX_BODY_BYTES) -> None:
        super().__init__(f"the body is {size} bytes; the limit is {limit} bytes (32 MiB)", limit=limit)


class NotServed(ProtocolError):
    status = 404
    code = "not_found"
    error_type = "not_found"
    reason = "no_such_endpoint"


class UnsupportedCapability(ProtocolError):
    """The target cannot carry what the request asks (a span question for systemone/0.2)."""

    code = "unsupported_capability"
    reason = "unsupported_capability"


class QuestionFailed(ProtocolError):
    """A question the model could not answer; on /v1/systemone it fails the whole request."""

    code = "question_failed"


class DeadlineExceeded(QuestionFailed):
    status = 504
    error_type = "timeout"
    reason = "deadline_exceeded"


class UpstreamError(ProtocolError):
    """An error reply from an upstream, decoded; ``info.body`` keeps the bytes it came in."""

    code = "upstream_error"
    error_type = "upstream_error"


def loc_text(loc: tuple[str | int, ...]) -> str:
    """``("body", "questions", "q1")`` -> ``questions.q1``."""
    parts = [str(p) for p in loc[1:]] if loc and loc[0] == "body" else [str(p) for p in loc]
    return ".".join(parts) or "body"


__all__ = [
    "ERROR_TYPE_BY_STATUS",
    "MAX_BODY_BYTES",
    "QUESTION_ERROR_STATUS",
    "DeadlineExceeded",
    "DetailItem",
    "ErrorInfo",
    "InvalidRequest",
    "NotServed",
    "ProtocolError",
    "QuestionFailed",
    "RequestTooLarge",
    "UnknownMembers",
    "UnsupportedCapability",
    "UpstreamError",
    "ValidationFailed",
]
