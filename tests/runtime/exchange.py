"""One request through the runtime's codec and engine, as `vllm-srun answer` and the server send
it: the body a client gets, or the status and error body of a refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sr_runtime.engine import Engine
from sr_runtime.request import answer
from systemone import REGISTRY, ProtocolError


def respond(
    engine: Engine, doc: dict[str, Any], schema: str = "vllm-sr/5.0", path: str = "/v1/systemone"
) -> dict[str, Any]:
    return json.loads(answer(engine, REGISTRY.listener(schema).read(path, json.dumps(doc).encode())))  # type: ignore[no-any-return]


def refusal(engine: Engine, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The status and body a client gets for a request the model refuses."""
    req = REGISTRY.listener("vllm-sr/5.0").read("/v1/systemone", json.dumps(doc).encode())
    with pytest.raises(ProtocolError) as caught:
        answer(engine, req)
    sent = REGISTRY.listener("vllm-sr/5.0").answer_error(caught.value, req)
    return sent.status, json.loads(sent.body)
