"""The Decide path (docs/decide/): an LLM request naming a virtual model of its listener.

    read      the body's conversation as parts (sr_control.decide.request.parts_of)
    ask       keyword signals here; the others in ONE System One request per decision model
              (build_calls), sent by the sidecar itself to a member of that model, members tried
              in turn until one answers; a call that fails or times out makes its signals
              unknown, and each signal's ``on_unknown`` decides (decide)
    decide    the virtual model's routes, highest priority first (sr_control.decide.rules)
    forward   ``model`` rewritten (and the route's system prompt and headers): Envoy sends the
              body to the chosen provider's cluster, as for any LLM request (llm.to_provider)

The client's answer streams back untouched; its headers get ``x-vsr-decision`` (the route, or
``default``) and ``x-vsr-model``. No route and no default: the API's own error (400), never a
5xx of the router's. Judges (escalation after the answer) are not on the live path yet.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from sr_control.decide.request import (
    DecideCall,
    NotAConversation,
    build_calls,
    parts_of,
    read_answers,
)
from sr_control.decide.rewrite import response_headers, rewritten
from sr_control.decide.rules import Answer as SignalAnswer
from sr_control.decide.rules import VirtualModelPlan, decide, keyword_answers
from sr_control.extproc.auth import upstream_key
from sr_control.extproc.envoy import Answer, Forward
from sr_control.extproc.incoming import Incoming, Sidecar
from sr_control.extproc.llm import llm_error, model_of, to_provider
from sr_control.extproc.metrics import upstream_result
from sr_control.extproc.upstream import CallFailed
from systemone import REGISTRY, Policy, ProtocolError, Target, WireReply
from systemone.ir import ItemResult

NO_DECISION = "none"


def virtual_model(incoming: Incoming, body: bytes) -> VirtualModelPlan | None:
    """The plan of the virtual model the body names, when this listener offers it on this API."""
    plans = incoming.data.virtual_models
    if not plans:
        return None
    model = model_of(body)
    offer = incoming.data.offers.get(incoming.api)
    if not isinstance(model, str) or offer is None or model not in offer.models:
        return None
    return plans.get(model)


async def decide_request(
    sidecar: Sidecar, incoming: Incoming, body: bytes, plan: VirtualModelPlan
) -> tuple[Forward | Answer, tuple[tuple[str, str], ...]]:
    """Where the request goes (or the API's error), and the headers its answer gets."""
    api = incoming.api
    started = time.monotonic()
    try:
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise NotAConversation("the request body is not a JSON object")
        parts = parts_of(api, doc)
    except (ValueError, NotAConversation) as exc:
        return llm_error(api, 400, f"not a {api} request: {exc}", "invalid_request"), ()
    answers: dict[str, SignalAnswer] = keyword_answers(plan, parts.text)
    calls = build_calls(plan, parts)
    asked = [c for c in calls if not c.empty]
    got = await asyncio.gather(*(_ask(sidecar, incoming, c) for c in asked))
    for call in calls:
        result, failure = got[asked.index(call)] if call in asked else (None, "nothing to ask")
        answers |= read_answers(call, result, failure)
    decision = decide(plan, answers)
    metrics = sidecar.metrics
    metrics.decide_calls.observe(len(asked))
    for name, answer in answers.items():
        for bucket in _buckets(answer):
            metrics.decide_answers.labels(name, bucket).inc()
    metrics.decide_seconds.labels(incoming.listener).observe(time.monotonic() - started)
    model = decision.model
    if model is None:
        metrics.decide_requests.labels(incoming.listener, NO_DECISION, "").inc()
        routes = ", ".join(f"{t.route}: {t.outcome}" for t in decision.trace)
        return llm_error(
            api,
            400,
            f"no route of virtual model '{plan.name}' matches this request and it has no default ({routes})",
            "no_route",
            "model",
        ), ()
    headers = response_headers(decision, model)
    metrics.decide_requests.labels(incoming.listener, headers[0][1], model).inc()
    provider = incoming.data.providers.get(model)
    if provider is None:  # the compiler carries every route target: a config that changed under us
        return llm_error(api, 404, f"The model '{model}' has no provider on this listener", "model_not_found"), ()
    rewrite = decision.rewrite
    new_body = json.dumps(rewritten(api, doc, model, rewrite), ensure_ascii=False).encode()
    sets = tuple(rewrite.headers.items()) if rewrite is not None else ()
    return to_provider(incoming, provider, sets, new_body), headers


async def _ask(sidecar: Sidecar, incoming: Incoming, call: DecideCall) -> tuple[ItemResult | None, str | None]:
    """``call`` sent to the members of its decision model in turn, until one answers: the answer,
    or why there is none. A timeout ends the call (its deadline is spent)."""
    data = incoming.data
    members = [data.members[m] for m in data.models.get(call.model, ()) if m in data.members]
    if not members:
        return None, f"no member serves decision model {call.model!r} on this listener"
    failure = "not called"
    deadline = time.monotonic() + call.deadline_ms / 1000
    for member in members:
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return None, f"no answer within {call.deadline_ms} ms"
        codec = REGISTRY.client(member.schema)
        target = Target(member.schema, member.model, member.deviations, member.max_concurrency, member.systemone_path)
        try:
            wire_plan = codec.plan(call.request, target, Policy(max(1, int(left_s * 1000))))
        except ProtocolError as exc:
            failure = f"{member.name}: {exc.info.message}"
            continue
        key = upstream_key(member.api_key_env)
        auth = (("authorization", f"Bearer {key}"),) if key is not None else ()
        results: dict[str, ItemResult] = {}
        try:
            with sidecar.pool.calling(member):
                for wire in wire_plan.calls:
                    reply = await sidecar.http.request(
                        "POST",
                        member.origin + wire.path,
                        body=wire.body,
                        headers=[*wire.headers, *auth, ("x-request-id", incoming.request_id)],
                        timeout_s=max(0.001, deadline - time.monotonic()),
                    )
                    sidecar.metrics.upstream.labels(member.name, upstream_result(reply.status)).inc()
                    results |= codec.decode_reply(
                        wire_plan, wire, WireReply(reply.status, reply.body, tuple(reply.headers))
                    )
            result = codec.assemble(wire_plan, results).items[""]
        except CallFailed as exc:
            sidecar.metrics.upstream.labels(member.name, exc.kind).inc()
            if exc.kind == "timeout":
                return None, f"{member.name}: no answer within {call.deadline_ms} ms"
            sidecar.cards.failed(member, str(exc))
            failure = f"{member.name}: {exc}"
            continue
        except ProtocolError as exc:
            failure = f"{member.name}: {exc.info.message}"
            continue
        except Exception as exc:  # noqa: BLE001 - a reply of the wrong shape: its signals are unknown
            failure = f"{member.name}: unreadable reply: {type(exc).__name__}: {exc}"
            continue
        return result, None
    return None, failure


def _buckets(answer: SignalAnswer) -> list[str]:
    """An answer as metric label values, few enough to keep the series bounded."""
    value: Any = answer.value
    if answer.unknown is not None or value is None:
        return ["unknown"]
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, float | int):
        if answer.kind == "noul":
            low = min(4, int(value * 5)) / 5
            return [f"{low:.1f}-{low + 0.2:.1f}"]
        return [str(round(value))]
    if isinstance(value, frozenset):
        return sorted(value) or ["none"]
    return [str(value)]


__all__ = ["decide_request", "virtual_model"]
