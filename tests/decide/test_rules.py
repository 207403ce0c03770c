"""The route evaluator agrees with a plain reference evaluator on generated answers and routes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sr_control.config.model import Judge, Signal, VirtualModel
from sr_control.decide.judge import escalate
from sr_control.decide.rules import Answer, compile_virtual_model, decide, keyword_answers

OPTIONS = ["billing", "engineering", "other"]
LABELS = ["refund", "outage", "legal"]
SPAN_LABELS = ["person", "email"]
SIGNALS: dict[str, dict[str, Any]] = {
    "urgent": {"type": "noul", "instructions": "Does it block the user's work?"},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high", "now"]},
    "team": {"type": "choice", "instructions": "Which team?", "criteria": dict.fromkeys(OPTIONS)},
    "topics": {"type": "set", "instructions": "Which topics?", "criteria": dict.fromkeys(LABELS)},
    "pii": {"type": "span", "instructions": "Mark personal data.", "criteria": dict.fromkeys(SPAN_LABELS)},
    "refund_words": {"keyword": "(?i)refund"},
}
KIND = {name: s.get("type", "keyword") for name, s in SIGNALS.items()}


# ---------------------------------------------------------------------------- strategies

# Answers and thresholds drawn from one small set as often as not, so that an answer equal to its
# threshold (where above and at_least part ways) comes up.
PROBABILITIES = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), st.floats(0, 1))
LEVELS = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0]), st.floats(0, 3))


def atoms() -> st.SearchStrategy[dict[str, Any]]:
    bound = st.sampled_from(["above", "at_least", "below", "at_most"])
    noul = st.dictionaries(bound, PROBABILITIES, max_size=2).map(lambda b: {"noul": "urgent", **b})
    score = st.dictionaries(bound, LEVELS, min_size=1, max_size=2).map(lambda b: {"score": "urgency", **b})
    choice = st.one_of(st.sampled_from(OPTIONS), st.lists(st.sampled_from(OPTIONS), min_size=1, max_size=2)).map(
        lambda o: {"choice": "team", "is": o}
    )
    set_ = st.sampled_from(LABELS).map(lambda label: {"set": "topics", "contains": label})
    span = st.one_of(st.none(), st.sampled_from(SPAN_LABELS)).map(
        lambda label: {"span": "pii"} | ({"label": label} if label else {})
    )
    keyword = st.just({"keyword": "refund_words"})
    return st.one_of(noul, score, choice, set_, span, keyword)


conditions = st.recursive(
    atoms(),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda cs: {"all": cs}),
        st.lists(inner, min_size=1, max_size=3).map(lambda cs: {"any": cs}),
        inner.map(lambda c: {"not": c}),
    ),
    max_leaves=6,
)


@st.composite
def routes(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 5))
    out = []
    for i in range(n):
        route: dict[str, Any] = {"name": f"r{i}", "model": f"llm-{i}", "priority": draw(st.integers(0, 2))}
        if draw(st.integers(0, 5)):
            route["when"] = draw(conditions)
        out.append(route)
    return out


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    out = {}
    for name, kind in KIND.items():
        if kind == "keyword":
            continue
        choices: list[Any] = [False, True, "skip"] + (OPTIONS if kind == "choice" else [])
        out[name] = draw(st.sampled_from(choices))
    return out


@st.composite
def answers(draw: st.DrawFn) -> dict[str, Any]:
    """Each signal's answer value, or None for unknown (a keyword signal is always known)."""
    values = {
        "urgent": PROBABILITIES,
        "urgency": LEVELS,
        "team": st.sampled_from(OPTIONS),
        "topics": st.frozensets(st.sampled_from(LABELS)),
        "pii": st.frozensets(st.sampled_from(SPAN_LABELS)),
        "refund_words": st.booleans(),
    }
    out = {}
    for name, strategy in values.items():
        known = name == "refund_words" or draw(st.booleans())
        out[name] = draw(strategy) if known else None
    return out


# ---------------------------------------------------------------------------- the reference


def referenced(c: dict[str, Any] | None) -> list[str]:
    if c is None:
        return []
    if "all" in c or "any" in c:
        return [s for child in c.get("all", c.get("any")) for s in referenced(child)]
    if "not" in c:
        return referenced(c["not"])
    return [next(c[k] for k in KIND.values() if k in c)]


def reference_holds(c: dict[str, Any], values: dict[str, Any], policy: dict[str, Any]) -> bool:
    if "all" in c:
        return all(reference_holds(x, values, policy) for x in c["all"])
    if "any" in c:
        return any(reference_holds(x, values, policy) for x in c["any"])
    if "not" in c:
        return not reference_holds(c["not"], values, policy)
    kind = next(k for k in ("noul", "score", "choice", "set", "span", "keyword") if k in c)
    value = values[c[kind]]
    if value is None:
        rule = policy[c[kind]]
        if rule is True or rule is False:
            return rule
        value = rule  # a default option (skip never reaches here)
    if kind in ("noul", "score"):
        checks = {k: v for k, v in c.items() if k in ("above", "at_least", "below", "at_most")}
        if not checks:
            checks = {"at_least": 0.5}
        ok = True
        for k, t in checks.items():
            ok = ok and {"above": value > t, "at_least": value >= t, "below": value < t, "at_most": value <= t}[k]
        return ok
    if kind == "choice":
        return value == c["is"] if isinstance(c["is"], str) else value in c["is"]
    if kind == "set":
        return c["contains"] in value
    if kind == "span":
        return c["label"] in value if "label" in c else len(value) > 0
    return value


def reference_decide(
    rs: list[dict[str, Any]], values: dict[str, Any], policy: dict[str, Any], default: str | None
) -> tuple[str | None, tuple[str, ...]]:
    order = sorted(range(len(rs)), key=lambda i: (-rs[i]["priority"], i))
    for i in order:
        route = rs[i]
        if any(values[s] is None and policy[s] == "skip" for s in referenced(route.get("when"))):
            continue
        if "when" not in route or reference_holds(route["when"], values, policy):
            return route["name"], (route["model"],)
    return None, (default,) if default else ()


# ---------------------------------------------------------------------------- the property


def signals_with(policy: dict[str, Any]) -> dict[str, Signal]:
    return {
        name: Signal.model_validate(spec | ({"on_unknown": policy[name]} if name in policy else {}))
        for name, spec in SIGNALS.items()
    }


@settings(max_examples=400, deadline=None)
@given(routes(), policies(), answers(), st.sampled_from([None, "fallback-llm"]))
def test_the_evaluator_agrees_with_the_reference(
    rs: list[dict[str, Any]], policy: dict[str, Any], values: dict[str, Any], default: str | None
) -> None:
    vm = VirtualModel.model_validate({"routes": rs, "default": default})
    plan = compile_virtual_model("vllm-sr/router", vm, signals_with(policy), {})
    given = {
        name: Answer(KIND[name], value) if value is not None else Answer.missing(KIND[name], "timeout")
        for name, value in values.items()
    }
    decision = decide(plan, given)
    assert (decision.route, decision.models) == reference_decide(rs, values, policy, default)


def test_a_route_naming_an_unknown_skip_signal_is_passed_over_even_when_another_test_holds() -> None:
    vm = VirtualModel.model_validate(
        {
            "routes": [
                {"name": "either", "when": {"any": [{"keyword": "refund_words"}, {"noul": "urgent"}]}, "model": "a"},
                {"name": "rest", "model": "b"},
            ]
        }
    )
    plan = compile_virtual_model("vm", vm, signals_with({"urgent": "skip"}), {})
    decision = decide(plan, {"refund_words": Answer("keyword", True), "urgent": Answer.missing("noul", "timeout")})
    assert decision.route == "rest"
    assert [(t.route, t.outcome, t.unknown) for t in decision.trace] == [
        ("either", "skipped", ("urgent",)),
        ("rest", "fired", ()),
    ]


def test_keyword_signals_match_any_of_their_parts_and_an_absent_part_matches_nothing() -> None:
    signals = {"refund_words": Signal.model_validate({"keyword": "(?i)\\brefund", "input": ["request", "history"]})}
    vm = VirtualModel.model_validate({"routes": [{"name": "r", "when": {"keyword": "refund_words"}, "model": "a"}]})
    plan = compile_virtual_model("vm", vm, signals, {})
    assert keyword_answers(plan, {"request": "hi", "history": "I want a Refund"}) == {
        "refund_words": Answer("keyword", True)
    }
    assert keyword_answers(plan, {"request": "hi"}) == {"refund_words": Answer("keyword", False)}


def judged(answer: float | None, on_unknown: Any = "skip") -> tuple[str | None, str]:
    signals = {
        "weak": Signal.model_validate(
            {
                "type": "noul",
                "instructions": "Is the answer weak?",
                "input": ["request", "answer"],
                "on_unknown": on_unknown,
            }
        )
    }
    judges = {"weak_answer": Judge.model_validate({"when": {"noul": "weak", "above": 0.6}, "deadline_ms": 5000})}
    vm = VirtualModel.model_validate({"routes": [{"name": "r", "model": ["small", "big"], "judge": "weak_answer"}]})
    plan = compile_virtual_model("vm", vm, signals, judges)
    decision = decide(plan, {})
    given = {"weak": Answer("noul", answer) if answer is not None else Answer.missing("noul", "too many candidates")}
    step = escalate(plan, decision, given, tried=1, elapsed_ms=100)
    return step.to, step.why


def test_a_judge_escalates_a_weak_answer_to_the_routes_next_model() -> None:
    assert judged(0.9)[0] == "big"
    assert judged(0.2)[0] is None


def test_a_judge_whose_call_failed_keeps_the_answer_unless_on_unknown_says_escalate() -> None:
    assert judged(None) == (None, "unknown: weak (on_unknown: skip keeps the answer)")
    assert judged(None, on_unknown=True)[0] == "big"


def test_a_judge_stops_at_the_last_model_and_at_its_deadline() -> None:
    signals = {"weak": Signal.model_validate({"type": "noul", "instructions": "Weak?", "input": ["answer"]})}
    judges = {"j": Judge.model_validate({"when": {"noul": "weak"}, "deadline_ms": 1000, "max_escalations": 3})}
    vm = VirtualModel.model_validate({"routes": [{"name": "r", "model": ["a", "b"], "judge": "j"}]})
    plan = compile_virtual_model("vm", vm, signals, judges)
    decision = decide(plan, {})
    weak = {"weak": Answer("noul", 1.0)}
    assert escalate(plan, decision, weak, tried=2, elapsed_ms=0).to is None
    assert escalate(plan, decision, weak, tried=1, elapsed_ms=1000).why == "past the judge's deadline of 1000 ms"
