"""One System One request answered offline, by the same codec and bridge as the HTTP server.

    req = read(body, "vllm-sr/5.0")      # ClientRequest, or the ProtocolError a client would get
    answer(engine, req)                  # the 200 body, or a ProtocolError (a question failed)

`vllm-srun answer` runs exactly the server's steps, minus the HTTP layer and the scheduler, so
a request file and a `curl` to `vllm-srun serve` get the same bytes. ``read_request`` gives
scripts and tests the engine's view of one request (its ids and DecisionRequest).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sr_runtime.server.bridge import EnginePlan, ItemPlan, to_engine, to_reply
from sr_runtime.server.served import ServedModel
from sr_runtime.types import DecisionEngine, DecisionRequest, Limits, ModelCard, Result
from systemone import REGISTRY, ClientRequest, Request
from systemone.replies import question_error

PATH = "/v1/systemone"


def read(body: bytes, schema: str = "vllm-sr/5.0") -> ClientRequest:
    return REGISTRY.listener(schema).read(PATH, body)


def answer(engine: DecisionEngine, req: ClientRequest) -> bytes:
    card = engine.card()
    ServedModel(engine.name, card, "").check(req.ir)
    plan = to_engine(req.ir, card)
    started = time.monotonic()
    results = engine.answer_batch(plan.requests) if plan.requests else []
    timings = {
        "queue_ms": 0.0,
        "inference_ms": round((time.monotonic() - started) * 1000, 3),
        "batched_requests": len(plan.requests),
    }
    reply = to_reply(plan, results, engine.name, {"meta": timings}, legacy=req.schema == "vllm-sr/4.0")
    return REGISTRY.listener(req.schema).answer_success(req, reply)


# What every model here answers; read_request checks a request against it, not against one model.
TEXT_MODEL = ModelCard("", "", ("noul", "choice", "score"), ("text",), (), Limits(255, 2, 10, 0), "", "")


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """One request as the engine sees it: question ids in order, and the DecisionRequest."""

    req: ClientRequest
    item: ItemPlan

    @property
    def model(self) -> str | None:
        return self.req.ir.model

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self.item.questions)

    @property
    def request(self) -> DecisionRequest:
        assert self.item.request is not None
        return self.item.request

    def response(self, model: str, result: Result) -> dict[str, Any]:
        """The standard response body for ``result`` (QuestionFailed if a question failed)."""
        reply = to_reply(EnginePlan({"": self.item}), [result], model)
        return json.loads(REGISTRY.listener(self.req.schema).answer_success(self.req, reply))


def read_request(body: Mapping[str, Any] | bytes, schema: str = "vllm-sr/5.0") -> ParsedRequest:
    """Read one request; the ProtocolError a client would get if it is invalid or not answerable."""
    data = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode("utf-8")
    req = read(data, schema)
    assert isinstance(req.ir, Request)
    item = to_engine(req.ir, TEXT_MODEL).items[""]
    if item.failures:
        q_id, failure = next(iter(item.failures.items()))
        raise question_error(q_id, {"error": failure.code, "reason": failure.reason, "message": failure.message})
    return ParsedRequest(req, item)


__all__ = ["PATH", "ParsedRequest", "answer", "read", "read_request"]
