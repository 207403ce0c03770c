"""One System One request answered offline, by the same codec and bridge as the HTTP server.

    req = read(body, "vllm-sr/5.0")      # ClientRequest, or the ProtocolError a client would get
    answer(engine, req)                  # the 200 body, or a ProtocolError (a question failed)

`vllm-srun answer` runs exactly the server's steps, minus the HTTP layer and the scheduler, so
a request file and a `curl` to `vllm-srun serve` get the same bytes.
"""

from __future__ import annotations

from sr_control.systemone import REGISTRY, ClientRequest
from sr_runtime.server.bridge import to_engine, to_reply
from sr_runtime.server.served import ServedModel
from sr_runtime.types import DecisionEngine

PATH = "/v1/systemone"


def read(body: bytes, schema: str = "vllm-sr/5.0") -> ClientRequest:
    return REGISTRY.listener(schema).read(PATH, body)


def answer(engine: DecisionEngine, req: ClientRequest) -> bytes:
    card = engine.card()
    ServedModel(engine.name, card, "").check(req.ir)
    plan = to_engine(req.ir, card)
    results = engine.answer_batch(plan.requests) if plan.requests else []
    return REGISTRY.listener(req.schema).answer_success(req, to_reply(plan, results, engine.name))
