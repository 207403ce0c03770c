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
``default``) and ``x-vsr-model``, which Envoy adds from the decision's record in the request's
dynamic metadata (``Decided.record``, namespace ``vllm-sr.decide``; the access log writes it
too), so the answer's headers need no message to the sidecar. No route and no default: the
API's own error (400), never a 5xx of the router's.

    judge     a route with a judge and a next model, on a non-streamed answer: judge.py
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from sr_base.log import get_logger
from sr_control.card import Card
from sr_control.config.model import Signal
from sr_control.decide.cards import lacks, plan_problems
from sr_control.decide.request import (
    EMPTY,
    DecideCall,
    NotAConversation,
    Parts,
    build_calls,
    parts_of,
    read_answers,
)
from sr_control.decide.rewrite import NO_ROUTE, rewritten
from sr_control.decide.rules import Answer as SignalAnswer
from sr_control.decide.rules import Decision, VirtualModelPlan, decide, keyword_answers
from sr_control.extproc.auth import upstream_key
from sr_control.extproc.cards import CardBook
from sr_control.extproc.data import ListenerData, Member
from sr_control.extproc.envoy import Answer, Forward
from sr_control.extproc.incoming import Incoming, Sidecar
from sr_control.extproc.llm import llm_error, model_of, to_provider
from sr_control.extproc.members import RETRIABLE
from sr_control.extproc.metrics import upstream_result
from sr_control.extproc.upstream import CallFailed
from sr_control.extproc.versions import VersionStore
from systemone import REGISTRY, Policy, ProtocolError, Target, WireReply
from systemone.ir import ItemResult

NO_DECISION = "none"
_log = get_logger("vllm_sr.extproc.decide")


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


@dataclass(frozen=True)
class Decided:
    """A decided request: its record for Envoy (the access log's fields and the answer's x-vsr-*
    headers, through dynamic metadata), and for a judge what it reads."""

    plan: VirtualModelPlan
    decision: Decision
    parts: Parts
    body: dict[str, Any]  # the client's body, parsed
    record: dict[str, Any]  # decision, model, signals (name -> answer as shown), version

    @property
    def judged(self) -> bool:
        """The route's judge reads the answer: a non-streamed answer from a route with a next model."""
        return self.decision.judge is not None and len(self.decision.models) > 1 and self.body.get("stream") is not True


async def decide_request(
    sidecar: Sidecar, incoming: Incoming, body: bytes, plan: VirtualModelPlan
) -> tuple[Forward | Answer, Decided | None]:
    """Where the request goes (or the API's error), and the decision (None: the body was not a
    request of its API, nothing was asked)."""
    api = incoming.api
    started = time.monotonic()
    try:
        doc = msgspec.json.decode(body)
        if not isinstance(doc, dict):
            raise NotAConversation("the request body is not a JSON object")
        parts = parts_of(api, doc)
    except (ValueError, NotAConversation) as exc:
        return llm_error(api, 400, f"not a {api} request: {exc}", "invalid_request"), None
    answers, asked = await ask_signals(sidecar, incoming, plan, parts, judge=False)
    decision = decide(plan, answers)
    metrics = sidecar.metrics
    metrics.decide_calls.observe(asked)
    metrics.decide_seconds.labels(incoming.listener).observe(time.monotonic() - started)
    model = decision.model
    label = NO_DECISION if model is None else decision.route or NO_ROUTE
    metrics.decide_requests.labels(incoming.listener, label, model or "").inc()
    record = {
        "decision": label,
        "model": model or "",
        "signals": {name: shown_answer(a) for name, a in answers.items()},
        "version": incoming.data.version,
    }
    decided = Decided(plan, decision, parts, doc, record)
    # Envoy's access log line has the decision (the record); this line is for debugging.
    _log.debug("decided", request_id=incoming.request_id, virtual_model=plan.name, calls=asked, **record)
    if model is None:
        routes = ", ".join(f"{t.route}: {t.outcome}" for t in decision.trace)
        return llm_error(
            api,
            400,
            f"no route of virtual model '{plan.name}' matches this request and it has no default ({routes})",
            "no_route",
            "model",
        ), decided
    provider = incoming.data.providers.get(model)
    if provider is None:  # the compiler carries every route target: a config that changed under us
        return llm_error(api, 404, f"The model '{model}' has no provider on this listener", "model_not_found"), decided
    rewrite = decision.rewrite
    new_body = msgspec.json.encode(rewritten(api, doc, model, rewrite))
    sets = tuple(rewrite.headers.items()) if rewrite is not None else ()
    return to_provider(incoming, provider, sets, new_body), decided


async def ask_signals(
    sidecar: Sidecar, incoming: Incoming, plan: VirtualModelPlan, parts: Parts, *, judge: bool
) -> tuple[dict[str, SignalAnswer], int]:
    """Every signal's answer (the judges' with ``judge``), and how many decision-model calls it
    took (HTTP calls: a member passed over for its card is not called)."""
    answers: dict[str, SignalAnswer] = keyword_answers(plan, parts.text, judge=judge)
    calls = build_calls(plan, parts, judge=judge)
    asked = [c for c in calls if not c.empty]
    signals = plan.judge_signals if judge else plan.signals
    if len(asked) == 1:  # the usual case, one decision model: no task to schedule
        got = [await _ask(sidecar, incoming, plan, asked[0], signals)]
    else:
        got = await asyncio.gather(*(_ask(sidecar, incoming, plan, c, signals) for c in asked))
    replies = iter(got)  # in the order of `asked`, which keeps the order of `calls`
    for call in calls:
        result, failure, _ = (None, EMPTY, 0) if call.empty else next(replies)
        answers |= read_answers(call, result, failure)
    counted = sidecar.metrics.decide_answers
    for name, answer in answers.items():
        for bucket in _buckets(answer):
            counted.labels(name, bucket).inc()
    return answers, sum(posted for _, _, posted in got)


async def _ask(
    sidecar: Sidecar, incoming: Incoming, plan: VirtualModelPlan, call: DecideCall, signals: Mapping[str, Signal]
) -> tuple[ItemResult | None, str | None, int]:
    """``call`` sent to the members of its decision model in turn, until one answers: the answer,
    or why there is none. A member whose card says it cannot answer one of the call's signals
    is passed over (the call goes to one member whole); a member answering a retriable status
    gives way to the next; a timeout ends the call (its deadline is spent). The third value:
    the HTTP calls made."""
    data = incoming.data
    members = [data.members[m] for m in data.models.get(call.model, ()) if m in data.members]
    if not members:
        return None, f"no member serves decision model {call.model!r} on this listener", 0
    failure = "not called"
    posted = 0
    deadline = time.monotonic() + call.deadline_ms / 1000
    for member in members:
        state = sidecar.cards.current(member)
        card = state.card if state is not None else None
        lacking = _lacking(plan, call, signals, card) if card is not None else ""
        if lacking:
            failure = f"{member.name} cannot answer: {lacking}"
            continue
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return None, f"no answer within {call.deadline_ms} ms", posted
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
        # At most max_concurrency calls open to the member, shared with the Forward path's.
        gate = sidecar.pool.gate(member)
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await gate.acquire()
        except TimeoutError:
            return None, f"{member.name} had no free call (max_concurrency {member.max_concurrency}) in time", posted
        try:
            with sidecar.pool.calling(member):
                for wire in wire_plan.calls:
                    posted += 1
                    reply = await sidecar.http.request(
                        "POST",
                        member.origin + wire.path,
                        body=wire.body,
                        headers=[*wire.headers, *auth, ("x-request-id", incoming.request_id)],
                        timeout_s=max(0.001, deadline - time.monotonic()),
                    )
                    sidecar.metrics.upstream.labels(member.name, upstream_result(reply.status)).inc()
                    if reply.status in RETRIABLE:
                        raise _GiveWay(f"{member.name} answered {reply.status}")
                    results |= codec.decode_reply(
                        wire_plan, wire, WireReply(reply.status, reply.body, tuple(reply.headers))
                    )
            result = codec.assemble(wire_plan, results).items[""]
        except CallFailed as exc:
            sidecar.metrics.upstream.labels(member.name, exc.kind).inc()
            if exc.kind == "timeout":
                return None, f"{member.name}: no answer within {call.deadline_ms} ms", posted
            sidecar.cards.failed(member, str(exc))
            failure = f"{member.name}: {exc}"
            continue
        except ProtocolError as exc:
            failure = f"{member.name}: {exc.info.message}"
            continue
        except _GiveWay as exc:
            failure = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - a reply of the wrong shape: its signals are unknown
            failure = f"{member.name}: unreadable reply: {type(exc).__name__}: {exc}"
            continue
        finally:
            gate.release()
        return result, None, posted
    return None, failure, posted


class CardChecks:
    """Every signal of a listener's virtual models against the cards of the members that would
    answer it (``plan_problems``), in the sidecar's log: one warning per problem, naming the
    signal, the model and what each member lacks; when a config version arrives and whenever a
    member's card arrives or changes. A problem is logged again only with a new version or once
    it has gone away and come back."""

    def __init__(self, store: VersionStore, cards: CardBook) -> None:
        self.store = store
        self.cards = cards
        self._reported: dict[str, tuple[str, frozenset[str]]] = {}  # listener -> (version, lines)

    async def arrived(self, data: ListenerData) -> None:
        await self.cards.refresh_all(data.members)
        self.check(data)

    def card_changed(self, member: Member) -> None:
        for data in self.store.current().values():
            if member.name in data.members:
                self.check(data)

    def check(self, data: ListenerData) -> list[str]:
        """The listener's problems now (each logged unless it already was for this version)."""
        if not data.virtual_models:
            return []
        cards = {}
        for name, member in data.members.items():
            state = self.cards.current(member)
            cards[name] = state.card if state is not None else None
        lines = plan_problems(data.virtual_models, lambda model: data.models.get(model, ()), cards)
        version, logged = self._reported.get(data.listener, ("", frozenset()))
        for line in lines:
            if version != data.version or line not in logged:
                _log.warning("signal cannot be asked", listener=data.listener, version=data.version, problem=line)
        self._reported[data.listener] = (data.version, frozenset(lines))
        return lines


def _lacking(plan: VirtualModelPlan, call: DecideCall, signals: Mapping[str, Signal], card: Card) -> str:
    """What ``card`` lacks to answer the call's signals, in one line ("" when nothing). A card
    changes seldom and the plan's requests ask the same signals: worked out once per pair."""
    key = ("lacking", call.signals, card)
    found: str | None = plan.memo.get(key)
    if found is None:
        found = plan.memo[key] = "; ".join(
            f"{name} needs {', '.join(w)}" for name in call.signals if (w := lacks(signals[name], card))
        )
    return found


def shown_answer(answer: SignalAnswer) -> Any:
    """An answer as the log shows it: its value, or ``unknown: why``."""
    if answer.unknown is not None:
        return f"unknown: {answer.unknown}"
    return sorted(answer.value) if isinstance(answer.value, frozenset) else answer.value


class _GiveWay(Exception):
    """A member answered a status after which another may answer (overloaded, unavailable)."""


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


__all__ = ["CardChecks", "Decided", "ask_signals", "decide_request", "shown_answer", "virtual_model"]
