"""After the chosen LLM answers: escalate to the route's next model, or keep the answer. No I/O.

    calls = build_calls(plan, parts.with_answer(answer_text(api, response)), judge=True)
    answers = keyword_answers(plan, parts, judge=True) | read_answers(call, result) ...
    step = escalate(plan, decision, answers, tried=1, elapsed_ms=...)   # Escalation

The sidecar will call these once the LLM's (non-streaming) answer is in, for a route with a
``judge``: if ``step.to`` is a model, it sends the request there and judges again, up to the
judge's ``max_escalations`` and while its ``deadline_ms`` allows. A streamed answer is not
judged. A judge never fails the request: a judge call that fails (too many candidates for the
model, a timeout, any error) leaves its signals unknown, their ``on_unknown`` decides, and
``skip`` keeps the answer (seed 002).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sr_control.decide.rules import Answer, Decision, VirtualModelPlan, holds, skips, unknown_in


@dataclass(frozen=True, slots=True)
class Escalation:
    to: str | None  # the next model to ask; None: keep the answer
    why: str


def escalate(
    plan: VirtualModelPlan, decision: Decision, answers: Mapping[str, Answer], tried: int, elapsed_ms: float
) -> Escalation:
    """``tried``: how many of ``decision.models`` have answered so far (1 after the first)."""
    if decision.judge is None:
        return Escalation(None, "the route has no judge")
    judge = plan.judges[decision.judge]
    if tried - 1 >= judge.max_escalations:
        return Escalation(None, f"escalated {tried - 1} time(s), the judge's max_escalations")
    if tried >= len(decision.models):
        return Escalation(None, "no model left in the route")
    if elapsed_ms >= judge.deadline_ms:
        return Escalation(None, f"past the judge's deadline of {judge.deadline_ms} ms")
    test = plan.judge_tests.get(decision.judge) or judge.when
    unknown = unknown_in(test, answers)
    if skips(unknown, plan.judge_signals):
        return Escalation(None, f"unknown: {', '.join(unknown)} (on_unknown: skip keeps the answer)")
    if holds(test, plan.judge_signals, answers):
        return Escalation(decision.models[tried], f"judge {decision.judge!r} holds")
    return Escalation(None, f"judge {decision.judge!r} does not hold")


__all__ = ["Escalation", "escalate"]
