"""Envoy's ext_proc wire: what the sidecar reads off a ProcessingRequest and the responses it
sends back. Every quirk of the protocol lives here, each with the reason (measured facts:
/work/shared/reference/envoy-xds-extproc.md, restated in docs/extproc/flow.md):

- header values arrive in ``raw_value`` (bytes), not ``value``;
- a header set by the sidecar overwrites the client's (``OVERWRITE_IF_EXISTS_OR_ADD``);
- naming the upstream cluster needs ``clear_route_cache``, else Envoy keeps the route it chose
  from the headers and answers 503 (no cluster);
- a body that changes size needs its ``content-length`` set too, else Envoy answers 500;
- ``:status`` may be changed in a response phase, and an immediate response may be sent in any
  phase: Envoy then answers with it and skips the rest (both checked against Envoy 1.40);
- a headers answer may carry ``mode_override`` (the listener sets ``allow_mode_override``):
  ``response_body_mode: NONE`` in the response-headers answer lets the reply's body go to the
  client without a response-body phase (a body answer's override is ignored).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from sr_control.decide.rewrite import METADATA_NAMESPACE as DECIDE_METADATA

_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
# The dynamic metadata namespaces the listener accepts from the sidecar (listener.yaml).
METADATA_NAMESPACE = "vllm-sr"
# A decided LLM request's record (decision, model, the signals' answers, version): the access
# log's fields, and the answer's x-vsr-* headers, which the route adds from it (routes.py), so
# no response-headers message comes to the sidecar for them.
DECIDE_NAMESPACE = DECIDE_METADATA

# Answers that carry nothing: built once, sent as they are (grpc serializes, never mutates).
CONTINUE_REQUEST_HEADERS = pb.ProcessingResponse(request_headers=pb.HeadersResponse())
CONTINUE_REQUEST_BODY = pb.ProcessingResponse(request_body=pb.BodyResponse())
CONTINUE_RESPONSE_HEADERS = pb.ProcessingResponse(response_headers=pb.HeadersResponse())
CONTINUE_RESPONSE_BODY = pb.ProcessingResponse(response_body=pb.BodyResponse())


@dataclass(frozen=True, slots=True)
class Forward:
    """Let Envoy forward the request: to ``cluster``, with these changes."""

    cluster: str | None = None  # None: the route's own choice
    path: str | None = None  # a new :path
    body: bytes | None = None  # a new body (None: the client's, unchanged)
    set_headers: tuple[tuple[str, str], ...] = ()
    remove_headers: tuple[str, ...] = ()
    member: str | None = None  # for the access log: the member it goes to


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer the client now (an immediate response), or, in a response phase, the new answer."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


def headers_of(message: pb.HttpHeaders) -> dict[str, str]:
    """Lower-cased names to values; a repeated header keeps its last value."""
    return {h.key: (h.raw_value or h.value.encode()).decode("latin-1") for h in message.headers.headers}


def _set(mutation: pb.HeaderMutation, headers: Iterable[tuple[str, str]]) -> None:
    # Filled in place: on this hot path, about half the time of building each message from
    # keyword arguments and copying it into its parent.
    for k, v in headers:
        option = mutation.set_headers.add(append_action=_OVERWRITE)
        option.header.key = k
        option.header.raw_value = v.encode("latin-1")


def _name_member(out: pb.ProcessingResponse, member: str | None) -> None:
    """The member that answers, in the request's dynamic metadata (the access log's ``member``)."""
    if member:
        out.dynamic_metadata.fields[METADATA_NAMESPACE].struct_value.fields["member"].string_value = member


def with_metadata(out: pb.ProcessingResponse, namespace: str, values: Mapping[str, Any]) -> pb.ProcessingResponse:
    """``out`` carrying ``values`` in the request's dynamic metadata under ``namespace``. Envoy
    merges them into what the namespace holds, whichever phase's answer carries them."""
    out.dynamic_metadata.fields[namespace].struct_value.update(values)
    return out


def forward(f: Forward, cluster_header: str) -> pb.ProcessingResponse:
    """The request-body answer that sends the request on, as ``f`` says."""
    sets = list(f.set_headers)
    if f.cluster is not None:
        sets.append((cluster_header, f.cluster))
    if f.path is not None:
        sets.append((":path", f.path))
    if f.body is not None:
        sets.append(("content-length", str(len(f.body))))
    out = pb.ProcessingResponse()
    common = out.request_body.response
    _set(common.header_mutation, sets)
    common.header_mutation.remove_headers.extend(f.remove_headers)
    if f.body is not None:
        common.body_mutation.body = f.body
    common.clear_route_cache = f.cluster is not None
    _name_member(out, f.member)
    return out


def forward_headers(f: Forward, cluster_header: str) -> pb.ProcessingResponse:
    """The request-headers answer for a request whose body is not read."""
    sets = list(f.set_headers) + ([(cluster_header, f.cluster)] if f.cluster is not None else [])
    if f.path is not None:
        sets.append((":path", f.path))
    out = pb.ProcessingResponse()
    common = out.request_headers.response
    _set(common.header_mutation, sets)
    common.header_mutation.remove_headers.extend(f.remove_headers)
    common.clear_route_cache = f.cluster is not None
    return out


def immediate(a: Answer, member: str | None = None) -> pb.ProcessingResponse:
    out = pb.ProcessingResponse()
    _name_member(out, member)
    immediate = out.immediate_response
    immediate.status.code = a.status
    _set(immediate.headers, a.headers)
    immediate.body = a.body
    return out


def pass_response(set_headers: Iterable[tuple[str, str]], remove_headers: Iterable[str] = ()) -> pb.ProcessingResponse:
    """The response-headers answer that lets the upstream's reply through as it is: these header
    changes, and no response-body phase for this request."""
    out = pb.ProcessingResponse()
    mutation = out.response_headers.response.header_mutation
    _set(mutation, set_headers)
    mutation.remove_headers.extend(remove_headers)
    out.mode_override.response_body_mode = processing_mode_pb2.ProcessingMode.NONE
    return out


def continue_response(remove_headers: Iterable[str]) -> pb.ProcessingResponse:
    """Go on to the response body, without these upstream headers."""
    out = pb.ProcessingResponse()
    out.response_headers.response.header_mutation.remove_headers.extend(remove_headers)
    return out


def replace_response(a: Answer, upstream_status: int, upstream_body: bytes) -> pb.ProcessingResponse:
    """The response-body answer that puts ``a`` in place of the upstream's answer: its headers
    and status, and its body unless that is, byte for byte, the upstream's own."""
    same = a.body == upstream_body
    sets = list(a.headers) if same else [*a.headers, ("content-length", str(len(a.body)))]
    if a.status != upstream_status:
        sets.append((":status", str(a.status)))
    out = pb.ProcessingResponse()
    common = out.response_body.response
    _set(common.header_mutation, sets)
    if not same:
        common.body_mutation.body = a.body
    return out


__all__ = [
    "CONTINUE_REQUEST_BODY",
    "DECIDE_NAMESPACE",
    "CONTINUE_REQUEST_HEADERS",
    "CONTINUE_RESPONSE_BODY",
    "CONTINUE_RESPONSE_HEADERS",
    "Answer",
    "Forward",
    "continue_response",
    "forward",
    "forward_headers",
    "headers_of",
    "immediate",
    "pass_response",
    "replace_response",
    "with_metadata",
]
