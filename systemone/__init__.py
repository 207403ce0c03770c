"""The System One protocol layer: schema IDs, IR, codecs, deviations, plans and errors. No I/O.

Server side (a listener, or the runtime's HTTP server)::

    codec = REGISTRY.listener("vllm-sr/5.0")
    req = codec.read(path, body, headers)          # ClientRequest: IR, plan, legacy forms
    codec.answer_success(req, decisions_reply)     # bytes (raises QuestionFailed on /v1/systemone)
    codec.answer_error(exc, req)                   # HttpAnswer(status, headers, body)

Client side (the router calling a deployment)::

    plan = REGISTRY.client("systemone/0.2").plan(req.ir, Target(...), Policy(deadline_ms=...))
"""

from systemone.client import CallPlan, Policy, SchemaCodec, Target, WireCall, WireReply
from systemone.errors import (
    DeadlineExceeded,
    DetailItem,
    ErrorInfo,
    InvalidRequest,
    NotServed,
    ProtocolError,
    QuestionFailed,
    RequestTooLarge,
    UnknownMembers,
    UnsupportedCapability,
    UpstreamError,
    ValidationFailed,
)
from systemone.ir import Batch, ItemResult, Listing, ListingItem, Question, Reply, Request, Roles
from systemone.listener import ClientRequest, ListenerCodec, ListenerPlan
from systemone.registry import REGISTRY, CodecRegistry
from systemone.replies import HttpAnswer

__all__ = [
    "REGISTRY",
    "Batch",
    "CallPlan",
    "ClientRequest",
    "CodecRegistry",
    "DeadlineExceeded",
    "DetailItem",
    "ErrorInfo",
    "HttpAnswer",
    "InvalidRequest",
    "ItemResult",
    "ListenerCodec",
    "ListenerPlan",
    "Listing",
    "ListingItem",
    "NotServed",
    "Policy",
    "ProtocolError",
    "Question",
    "QuestionFailed",
    "Reply",
    "Request",
    "RequestTooLarge",
    "Roles",
    "SchemaCodec",
    "Target",
    "UnknownMembers",
    "UnsupportedCapability",
    "UpstreamError",
    "ValidationFailed",
    "WireCall",
    "WireReply",
]
