"""A Decision applied to the LLM request: the chosen ``model``, the route's system prompt. No I/O.

    body = rewritten(api, body, model, decision.rewrite)     # a new dict; the client's is kept
    headers = response_headers(decision, model)               # x-vsr-decision, x-vsr-model

The sidecar calls ``rewritten`` before it names the provider's cluster (the body changes size:
it resets content-length, as for any body mutation) and adds ``rewrite.headers`` to the
upstream request; ``response_headers`` are the answer's (Envoy adds them from the decision's
dynamic metadata; the sidecar sets them itself when a judge escalated).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sr_control.config.model import Rewrite
from sr_control.decide.rules import Decision

DECISION_HEADER = "x-vsr-decision"
MODEL_HEADER = "x-vsr-model"
NO_ROUTE = "default"  # x-vsr-decision when no route fired and the default model answers
# The request's dynamic metadata namespace where the sidecar leaves the decision (``decision``,
# ``model``, ``signals``, ``version``): Envoy's access log writes it, and the route adds the
# answer's x-vsr-decision and x-vsr-model from it (sr_control/compiler/routes.py).
METADATA_NAMESPACE = "vllm-sr.decide"


def rewritten(api: str, body: Mapping[str, Any], model: str, rewrite: Rewrite | None) -> dict[str, Any]:
    """``body`` with ``model`` and, when the route says so, its system prompt in place of the
    request's own (chat: the leading system/developer messages; responses: ``instructions``;
    messages: ``system``)."""
    out = dict(body)
    out["model"] = model
    prompt = rewrite.system_prompt if rewrite is not None else None
    if prompt is None:
        return out
    if api == "chat_completions":
        messages = list(out.get("messages") or [])
        while messages and isinstance(messages[0], dict) and messages[0].get("role") in ("system", "developer"):
            messages.pop(0)
        out["messages"] = [{"role": "system", "content": prompt}, *messages]
    elif api == "responses":
        out["instructions"] = prompt
    elif api == "messages":
        out["system"] = prompt
    return out


def response_headers(decision: Decision, model: str) -> tuple[tuple[str, str], ...]:
    return ((DECISION_HEADER, decision.route or NO_ROUTE), (MODEL_HEADER, model))


__all__ = ["DECISION_HEADER", "METADATA_NAMESPACE", "MODEL_HEADER", "NO_ROUTE", "response_headers", "rewritten"]
