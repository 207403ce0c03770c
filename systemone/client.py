"""SchemaCodec: the client side of a schema, for the router calling an upstream. No I/O.

    codec = CLIENTS["systemone/0.2"]
    plan = codec.plan(ir, Target("systemone/0.2", model="d3", deviations=("state_text",)), Policy(deadline_ms=1500))
    for call in plan.calls:                   # the caller runs at most plan.max_concurrency at once
        results |= codec.decode_reply(plan, call, WireReply(status, body, headers))
        # or, for a call that missed plan.deadline_ms:  results |= codec.missed(plan, call)
    reply = codec.assemble(plan, results)     # -> Reply, in the shape of ir

The codec decides splitting, preset expansion and reassembly; its caller never does (seed 000).
vllm-sr/5.0 takes a batch in one call to the batch endpoint. systemone/0.2 takes one request per
call: a batch becomes one call per request, and its answers and per-request errors are put back
together; a call that misses the deadline makes only its own questions unknown. No deadline field
is sent to a 0.2 target: the caller times its calls itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from systemone.deviations import DEVIATIONS
from systemone.errors import DeadlineExceeded, ErrorInfo
from systemone.generated.fields import SPECS, STANDARD_ASSET_FORMATS, STANDARD_QUESTIONS
from systemone.generated.strip import REFUSE
from systemone.ir import Batch, ItemResult, Listing, Reply, Request, items
from systemone.jsontext import JsonObject, Number, dumpb
from systemone.listener import LONG_CONTEXT_HEADER
from systemone.replies import decode_error, decode_listing, decode_reply
from systemone.writing import request_doc

LISTING_PATH = "/v1/models"


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how a plan calls: a deployment's client settings."""

    schema: str = "systemone/0.2"
    model: str | None = None  # the deployment's model; None keeps the request's
    deviations: tuple[str, ...] = ()
    max_concurrency: int = 8
    path: str = "/v1/systemone"


@dataclass(frozen=True, slots=True)
class Policy:
    deadline_ms: int | None = None  # the caller's deadline for the whole plan


@dataclass(frozen=True, slots=True)
class WireCall:
    method: str
    path: str
    doc: JsonObject
    items: tuple[str, ...]  # the IR's request names this call answers ("" for a single request)
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)
    batch: bool = False  # the body is a batch-endpoint body

    @property
    def body(self) -> bytes:
        return dumpb(self.doc)


@dataclass(frozen=True, slots=True)
class WireReply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CallPlan:
    schema: str
    ir: Request | Batch
    calls: tuple[WireCall, ...]
    max_concurrency: int
    deadline_ms: int | None
    diagnostics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SchemaCodec:
    id: str
    spec: tuple[str, str]  # the spec file and its sha256
    capabilities: frozenset[str]
    batch: bool  # takes a batch in one call
    stateless: bool = True

    @property
    def listing_path(self) -> str:
        return LISTING_PATH

    def plan(self, ir: Request | Batch, target: Target, policy: Policy = Policy()) -> CallPlan:
        deadline = _deadline(ir, policy)
        options = None if self.id == "systemone/0.2" else _options(ir, deadline)
        long_context = ir.long_context or any(r.long_context for _, r in items(ir))
        headers = (("content-type", "application/json"),) + (((LONG_CONTEXT_HEADER, "true"),) if long_context else ())
        named = list(items(ir))
        if self.batch and isinstance(ir, Batch):
            doc = _batch_doc(ir, self.id, target.model, options)
            calls = [
                WireCall(
                    "POST", target.path.rstrip("/") + "/batch", doc, tuple(n for n, _ in named), headers, batch=True
                )
            ]
        else:
            calls = [
                WireCall("POST", target.path, request_doc(r, self.id, target.model, options), (name,), headers)
                for name, r in named
            ]
        diagnostics: list[str] = []
        if len(calls) > 1:
            diagnostics.append(f"split into {len(calls)} calls, at most {target.max_concurrency} at once")
        for name in target.deviations:
            deviation = DEVIATIONS[name]
            if not deviation.applies(self.id):
                raise ValueError(f"deviation {name!r} does not apply to {self.id}")
            rewritten = []
            for call in calls:
                call, notes = deviation.rewrite_request(call)
                rewritten.append(call)
                diagnostics += notes
            calls = rewritten
        return CallPlan(self.id, ir, tuple(calls), target.max_concurrency, deadline, tuple(diagnostics))

    def decode_reply(self, plan: CallPlan, call: WireCall, reply: WireReply) -> dict[str, ItemResult]:
        """Each of the call's requests, answered or failed (a failed batch names its request)."""
        if reply.status != 200:
            info = decode_error(reply.status, reply.headers, reply.body)
            if call.batch and info.state in call.items:
                # A 5.0 batch fails whole on one request's question: that request keeps the
                # error; the others were simply not answered.
                others = replace(
                    info,
                    code="question_failed",
                    reason="batch_failed",
                    question=None,
                    items=(),
                    message=f"not answered: the batch failed on request {info.state!r}",
                )
                return {
                    name: ItemResult(error=info if name == info.state else replace(others, state=name))
                    for name in call.items
                }
            return {name: ItemResult(error=_for_item(info, name, plan)) for name in call.items}
        if call.batch:
            sub = Batch({name: r for name, r in items(plan.ir) if name in call.items})
            return dict(decode_reply(reply.body, sub).items)
        # One request: its response, or ProtocolError for a body that is no JSON object, as for a batch.
        name = call.items[0]
        return {name: decode_reply(reply.body, dict(items(plan.ir))[name]).items[""]}

    def missed(self, plan: CallPlan, call: WireCall) -> dict[str, ItemResult]:
        """A call that did not answer within the caller's deadline: only its questions are unknown."""
        err = DeadlineExceeded(f"the call did not answer within the caller's deadline of {plan.deadline_ms} ms")
        return {name: ItemResult(error=_for_item(err.info, name, plan)) for name in call.items}

    def assemble(self, plan: CallPlan, results: Mapping[str, ItemResult]) -> Reply:
        named = {
            name: results.get(name) or ItemResult(error=_for_item(_NOT_RUN, name, plan)) for name, _ in items(plan.ir)
        }
        model = next((r.model for r in named.values() if r.model), None)
        return Reply(named, model)

    def decode_listing(self, status: int, body: bytes) -> Listing:
        return decode_listing(status, body)


_NOT_RUN = ErrorInfo(504, "question_failed", "the call was never made", "timeout", "deadline_exceeded")


def _for_item(info: ErrorInfo, name: str, plan: CallPlan) -> ErrorInfo:
    return replace(info, state=name) if isinstance(plan.ir, Batch) else info


def _batch_doc(ir: Batch, schema: str, model: str | None, options: JsonObject | None) -> JsonObject:
    members: list[tuple[str, object]] = []
    if model or ir.model:
        members.append(("model", model or ir.model))
    members.append(("requests", JsonObject((name, request_doc(r, schema)) for name, r in ir.items.items())))
    if options:
        members.append(("options", options))
    return JsonObject(members)


def _deadline(ir: Request | Batch, policy: Policy) -> int | None:
    given = [d for d in (policy.deadline_ms, ir.deadline_ms) if d is not None]
    return min(given) if given else None


def _options(ir: Request | Batch, deadline: int | None) -> JsonObject | None:
    """5.0 call options: the request's, without 4.0's long_context, with the caller's deadline."""
    base = [(k, v) for k, v in (ir.options or {}).items() if k != "long_context"]
    if deadline is not None:
        base = [(k, v) for k, v in base if k != "deadline_ms"] + [("deadline_ms", Number(str(deadline)))]
    return JsonObject(base) if base else None


def _capabilities(schema: str) -> frozenset[str]:
    """Question types, asset types and features a target of ``schema`` can be asked for."""
    standard = {*STANDARD_QUESTIONS, *STANDARD_ASSET_FORMATS, "presets"}  # presets: expanded
    if schema == "systemone/0.2":
        return frozenset(standard)
    return frozenset(
        standard | {*REFUSE["question_type"], *REFUSE["asset_type"], *REFUSE["question"], "batch", "roles"}
    )


def _codecs() -> dict[str, SchemaCodec]:
    return {
        sid: SchemaCodec(sid, SPECS[sid], _capabilities(sid), batch=sid != "systemone/0.2")
        for sid in ("systemone/0.2", "vllm-sr/5.0")
    }


CLIENTS: Mapping[str, SchemaCodec] = _codecs()
