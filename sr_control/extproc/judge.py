"""A decided request's judge on the live path (docs/decide/failures.md, Judges).

For a route with a judge and a next model, on a non-streamed answer: the route's API sends the
answer's body to the sidecar for that request only; the judge's signals are asked over it
(``decide.ask_signals``, one call per decision model) and, while the judge holds and its limits
allow, the request goes on to the route's next model. A streamed answer passes through unread.

The sidecar sends that request through the listener it came in on (the route names its address,
``x-vsr-listen``) with a token (``x-vsr-escalation``) signed with a key its workers share; seeing
it come back, whichever worker gets it names the next provider's cluster (``escalation``), so
Envoy adds that provider's key as it does the first model's. A judge never fails the request:
whatever goes wrong keeps the answer in hand.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import msgspec

from sr_base.log import get_logger
from sr_control.decide.judge import escalate
from sr_control.decide.request import answer_text
from sr_control.decide.rewrite import rewritten
from sr_control.decide.rules import Decision, VirtualModelPlan
from sr_control.extproc.auth import KeysUnavailable, upstream_key
from sr_control.extproc.decide import Decided, ask_signals, shown_answer
from sr_control.extproc.envoy import Forward
from sr_control.extproc.incoming import Incoming, Sidecar
from sr_control.extproc.llm import ANTHROPIC, to_provider
from sr_control.extproc.upstream import CallFailed

ESCALATION_HEADER = "x-vsr-escalation"
_log = get_logger("vllm_sr.extproc.decide")


@dataclass(frozen=True, slots=True)
class Judged:
    """What the client gets after the judge: the answer, the model that gave it, and the
    decision's record with the judge's answers added (the last asked of each signal)."""

    status: int
    body: bytes
    model: str
    record: dict[str, Any]


async def judge(
    sidecar: Sidecar, incoming: Incoming, decided: Decided, status: int, body: bytes, listen: str | None = None
) -> Judged:
    """The chosen model answered ``status``/``body``: the route's judge reads it and, while it
    holds (and the judge's limits allow), the sidecar sends the request on to the route's next
    model (through the listener at ``listen``, as ``escalation`` reads it). A judge never fails
    the request: what goes wrong keeps the answer in hand."""
    api = incoming.api
    plan, decision = decided.plan, decided.decision
    model = decision.model or ""
    shown = dict(decided.record["signals"])
    tried = 1
    while status == 200 and _may_escalate(plan, decision, tried, incoming):
        try:
            text = answer_text(api, msgspec.json.decode(body))
        except (ValueError, AttributeError, TypeError):
            break
        answers, _ = await ask_signals(sidecar, incoming, plan, decided.parts.with_answer(text), judge=True)
        shown |= {name: shown_answer(a) for name, a in answers.items()}
        step = escalate(plan, decision, answers, tried, (time.monotonic() - incoming.started) * 1000)
        if step.to is None:
            break
        got = await _ask_llm(sidecar, incoming, decided, step.to, listen)
        tried += 1
        if got is None or not 200 <= got[0] < 300:
            break  # the next model failed: the answer in hand stands
        status, body = got
        model = step.to
        sidecar.metrics.decide_requests.labels(incoming.listener, "escalated", step.to).inc()
    return Judged(status, body, model, {"model": model, "signals": shown})


def _may_escalate(plan: VirtualModelPlan, decision: Decision, tried: int, incoming: Incoming) -> bool:
    """escalate's limits, checked before its signals are asked: no call for an answer that stands
    whatever the judge says."""
    limits = plan.judges[decision.judge or ""]
    elapsed_ms = (time.monotonic() - incoming.started) * 1000
    return tried <= limits.max_escalations and tried < len(decision.models) and elapsed_ms < limits.deadline_ms


def escalation(sidecar: Sidecar, incoming: Incoming, body: bytes) -> Forward | None:
    """A judge's escalation a sidecar worker sent through this listener (its token, signed with
    the key every worker of this sidecar shares, names the virtual model, route and next model
    and holds for this body only, for the judge's deadline): on to that model's provider, whose
    key Envoy adds as it leaves, as for a first model. None for any other request."""
    token = incoming.headers.get(ESCALATION_HEADER)
    if token is None:
        return None
    claim, _, mac = token.partition(".")
    expected = _mac(sidecar.settings.escalation_key, incoming.listener, claim, body)
    if not hmac.compare_digest(mac.encode("latin-1"), expected.encode()):  # any header a client sends
        return None
    vm, route_name, model, expires = msgspec.json.decode(base64.urlsafe_b64decode(claim))
    plan = incoming.data.virtual_models.get(vm)
    route = next((r for _, r in plan.routes if r.name == route_name), None) if plan is not None else None
    provider = incoming.data.providers.get(model)
    if time.time() > expires or route is None or model not in route.models or provider is None:
        return None
    sets = tuple(route.rewrite.headers.items()) if route.rewrite is not None else ()
    return replace(to_provider(incoming, provider, sets), remove_headers=(ESCALATION_HEADER,))


def _token(sidecar: Sidecar, incoming: Incoming, decided: Decided, model: str, body: bytes, left_s: float) -> str:
    claim = [decided.plan.name, decided.decision.route, model, time.time() + left_s]
    sealed = base64.urlsafe_b64encode(msgspec.json.encode(claim)).decode()
    return f"{sealed}.{_mac(sidecar.settings.escalation_key, incoming.listener, sealed, body)}"


def _mac(key: bytes, listener: str, claim: str, body: bytes) -> str:
    signed = b"\n".join((listener.encode(), claim.encode(), hashlib.sha256(body).digest()))
    return hmac.new(key, signed, "sha256").hexdigest()


async def _ask_llm(
    sidecar: Sidecar, incoming: Incoming, decided: Decided, model: str, listen: str | None
) -> tuple[int, bytes] | None:
    """The request sent on to ``model`` (an escalation): its answer, or None when it could not
    be had (the earlier answer stands). Through the listener at ``listen`` (the route names it)
    when there is one, so Envoy sends it to the provider's cluster and adds its key; else
    straight to the provider, with the key only if the sidecar's environment holds it."""
    provider = incoming.data.providers.get(model)
    if provider is None or not provider.endpoints:
        return None
    rewrite = decided.decision.rewrite
    body = msgspec.json.encode(rewritten(incoming.api, decided.body, model, rewrite))
    limits = decided.plan.judges[decided.decision.judge or ""]
    left_s = max(0.001, limits.deadline_ms / 1000 - (time.monotonic() - incoming.started))
    headers = [("content-type", "application/json")]
    if listen is not None:
        # The client's own credentials, as the request came: a listener with keys checks them again.
        headers += [(h, v) for h in ("authorization", "x-api-key") if (v := incoming.headers.get(h))]
        headers.append((ESCALATION_HEADER, _token(sidecar, incoming, decided, model, body, left_s)))
        host, _, port = listen.rpartition(":")
        host = _LOOPBACK.get(host, host)
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}{incoming.path}"
    else:
        path = provider.base_path + incoming.path[len("/v1") :] if incoming.path.startswith("/v1") else incoming.path
        origin = urlsplit(provider.endpoints[0])
        url = f"{origin.scheme}://{origin.netloc}{path}"
        headers.append(("x-request-id", incoming.request_id))
        headers += list(rewrite.headers.items()) if rewrite is not None else []
        try:
            key = upstream_key(provider.api_key_env)
        except KeysUnavailable as exc:
            _log.warning(
                "escalation without the provider's key", request_id=incoming.request_id, model=model, error=str(exc)
            )
            return None
        if key is not None:
            headers.append(("x-api-key", key) if incoming.api == ANTHROPIC else ("authorization", f"Bearer {key}"))
    try:
        reply = await sidecar.http.request("POST", url, body=body, headers=headers, timeout_s=left_s)
    except CallFailed:
        return None
    return reply.status, reply.body


# A listener bound to every address is reached on loopback: the sidecar runs beside its Envoy.
_LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1"}


__all__ = ["ESCALATION_HEADER", "Judged", "escalation", "judge"]
