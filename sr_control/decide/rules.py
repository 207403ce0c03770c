"""Signal answers -> a Decision: keyword signals and the ordered routes of a virtual model. No I/O.

    plan = compile_plan(config)                              # once per config
    vm = plan.virtual_models["vllm-sr/router"]
    answers = keyword_answers(vm, parts) | read_answers(call, result)   # request.py reads the latter
    decision = decide(vm, answers)    # Decision(route, models, rewrite, judge, trace)

Routes are tried highest ``priority`` first, equal priorities in file order; the first whose
condition holds fires. An answer is *unknown* when the decision model failed, timed out or could
not answer that question; each signal's ``on_unknown`` says what a test of it then means:

    false | true   the test's value                 (``not`` then inverts it, as any value)
    skip           every route that tests the signal is passed over
    an option      (choice signals) the answer is taken to be that option

No route firing sends the request to the virtual model's ``default`` (``Decision.route`` is
None); without a default, ``Decision.models`` is empty and the sidecar answers the API's own
error. The sidecar calls ``decide`` once per LLM request to a virtual model, after the
decision-model call(s) of ``request.build_calls`` have answered or failed.

Each condition is compiled once with its plan (``Test``): a request's ``decide`` reads plain
fields, never the config model's derived properties.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sr_control.config.model import Condition, Judge, Rewrite, Route, RouterConfig, Signal, VirtualModel

AnswerValue = float | str | frozenset[str] | bool


@dataclass(frozen=True, slots=True)
class Answer:
    """One signal's answer. ``value``: P(yes) for noul, the expected level for score, the option
    for choice, the selected labels for set, the labels of the spans found for span, whether it
    matched for keyword. ``unknown``: why there is no value (then ``value`` is None)."""

    kind: str
    value: AnswerValue | None = None
    unknown: str | None = None

    @staticmethod
    def missing(kind: str, why: str) -> Answer:
        return Answer(kind, None, why)


@dataclass(frozen=True, slots=True)
class RouteTrace:
    """What became of one route, for ``vllm-sr route`` and the access log."""

    route: str
    outcome: Literal["fired", "no", "skipped", "not tried"]
    unknown: tuple[str, ...] = ()  # signals it tests whose answers are unknown


@dataclass(frozen=True, slots=True)
class Decision:
    virtual_model: str
    route: str | None  # None: no route fired (the default, if any)
    models: tuple[str, ...]  # tried in order; () when no route fired and there is no default
    rewrite: Rewrite | None = None
    judge: str | None = None
    trace: tuple[RouteTrace, ...] = ()

    @property
    def model(self) -> str | None:
        return self.models[0] if self.models else None


@dataclass(frozen=True, slots=True)
class Test:
    """A condition compiled once (``compile_condition``): what ``holds`` reads per request."""

    kind: str  # all, any, not, or the kind of signal it tests
    signal: str | None = None
    bounds: tuple[tuple[Callable[[float, float], bool], float], ...] = ()  # noul, score
    options: frozenset[str] = frozenset()  # choice
    label: str | None = None  # set: the label it contains; span: the label present (None: any)
    children: tuple[Test, ...] = ()  # all, any, not
    signals: tuple[str, ...] = ()  # every signal it tests, in the order written (each once)


@dataclass(frozen=True)
class VirtualModelPlan:
    """A virtual model compiled once: its routes in the order they are tried, and the signals
    they (and their judges) read."""

    name: str
    routes: tuple[tuple[int, Route], ...]  # (file index, route), in trying order
    default: str | None
    signals: Mapping[str, Signal]  # every signal its routes test, in first-use order
    judges: Mapping[str, Judge]
    judge_signals: Mapping[str, Signal]  # the signals its judges test (asked after the answer)
    keywords: Mapping[str, re.Pattern[str]] = field(default_factory=dict)
    tests: tuple[Test | None, ...] = ()  # each route's condition compiled, in trying order
    judge_tests: Mapping[str, Test] = field(default_factory=dict)
    # What other modules derive from the plan once and reuse for every request (request.py's
    # questions); not part of the plan's value.
    memo: dict[object, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def model_signals(self) -> dict[str, Signal]:
        """The signals asked of decision models before the LLM is called."""
        return {name: s for name, s in self.signals.items() if s.asks_model}


@dataclass(frozen=True)
class DecidePlan:
    virtual_models: Mapping[str, VirtualModelPlan]
    signals: Mapping[str, Signal]


def signals_of(condition: Condition | None) -> list[str]:
    """The signals a condition tests, in the order written (each once)."""
    out: list[str] = []
    stack = [condition] if condition is not None else []
    while stack:
        c = stack.pop()
        if c.signal is not None:
            if c.signal not in out:
                out.append(c.signal)
        for child in reversed(c.all or c.any or ([c.not_] if c.not_ is not None else [])):
            stack.append(child)
    return out


def condition_text(c: Condition | None) -> str:
    """A condition in one line, for people: ``all(score urgency >= 2, not(span pii))``."""
    if c is None:
        return "always"
    kind = c.kind
    if kind in ("all", "any"):
        return f"{kind}({', '.join(condition_text(x) for x in c.all or c.any or ())})"
    if kind == "not":
        return f"not({condition_text(c.not_)})"
    head = f"{kind} {c.signal}"
    if kind in ("noul", "score"):
        symbols = {"above": ">", "at_least": ">=", "below": "<", "at_most": "<="}
        return " and ".join(f"{head} {symbols[b]} {t:g}" for b, t in (c.bounds or (("at_least", 0.5),)))
    if kind == "choice":
        return f"{head} is {' or '.join(c.options)}"
    if kind == "set":
        return f"{head} contains {c.contains}"
    if kind == "span":
        return f"{head} has {c.label if c.label else 'a span'}"
    return f"{head} matches"


def compile_plan(config: RouterConfig) -> DecidePlan:
    """The Decide plan of a valid config (``vllm-sr config validate`` passes on it)."""
    out = {}
    for name, vm in config.virtual_models.items():
        out[name] = compile_virtual_model(name, vm, config.signals, config.judges)
    return DecidePlan(out, dict(config.signals))


def compile_virtual_model(
    name: str, vm: VirtualModel, signals: Mapping[str, Signal], judges: Mapping[str, Judge]
) -> VirtualModelPlan:
    order = sorted(enumerate(vm.routes), key=lambda pair: (-pair[1].priority, pair[0]))
    used: dict[str, Signal] = {}
    used_judges: dict[str, Judge] = {}
    judge_signals: dict[str, Signal] = {}
    for _, route in order:
        for s in signals_of(route.when):
            used.setdefault(s, signals[s])
        if route.judge is not None and route.judge not in used_judges:
            used_judges[route.judge] = judges[route.judge]
            for s in signals_of(judges[route.judge].when):
                judge_signals.setdefault(s, signals[s])
    keywords = {s: re.compile(sig.keyword) for s, sig in (used | judge_signals).items() if sig.keyword is not None}
    tests = tuple(compile_condition(route.when) if route.when is not None else None for _, route in order)
    judge_tests = {name: compile_condition(j.when) for name, j in used_judges.items()}
    return VirtualModelPlan(
        name, tuple(order), vm.default, used, used_judges, judge_signals, keywords, tests, judge_tests
    )


def compile_condition(c: Condition) -> Test:
    kind = c.kind
    children = tuple(compile_condition(x) for x in c.all or c.any or ([c.not_] if c.not_ is not None else []))
    signals = tuple(signals_of(c))
    if kind in ("all", "any", "not"):
        return Test(kind, children=children, signals=signals)
    bounds = tuple((_BOUND[b], t) for b, t in (c.bounds or (("at_least", 0.5),)))  # bare noul: more likely yes
    label = c.contains if kind == "set" else c.label
    return Test(kind, c.signal, bounds, frozenset(c.options), label, signals=signals)


def keyword_answers(plan: VirtualModelPlan, parts: Mapping[str, str], *, judge: bool = False) -> dict[str, Answer]:
    """Each keyword signal: whether its expression matches any of its input parts (an absent
    part matches nothing). ``judge``: the judges' keyword signals, else the routes'."""
    signals = plan.judge_signals if judge else plan.signals
    out = {}
    for name, signal in signals.items():
        pattern = plan.keywords.get(name)
        if pattern is not None:
            hit = any(pattern.search(parts.get(part) or "") for part in signal.input)
            out[name] = Answer("keyword", hit)
    return out


def holds(condition: Condition | Test, signals: Mapping[str, Signal], answers: Mapping[str, Answer]) -> bool:
    """The condition's value over the answers (a missing answer is unknown). The caller has
    passed over conditions for which ``skips`` holds; a skip policy reached here counts false."""
    test = condition if isinstance(condition, Test) else compile_condition(condition)
    return _holds(test, signals, answers)


def _holds(t: Test, signals: Mapping[str, Signal], answers: Mapping[str, Answer]) -> bool:
    kind = t.kind
    if kind == "all":
        return all(_holds(c, signals, answers) for c in t.children)
    if kind == "any":
        return any(_holds(c, signals, answers) for c in t.children)
    if kind == "not":
        return not _holds(t.children[0], signals, answers)
    name = t.signal
    assert name is not None
    answer = answers.get(name)
    value = answer.value if answer is not None else None
    if value is None:
        policy = signals[name].on_unknown
        if isinstance(policy, bool):
            return policy
        if policy == "skip":
            return False
        value = policy  # a choice signal's default option
    return _test(t, value)


def _test(t: Test, value: AnswerValue) -> bool:
    kind = t.kind
    if kind in ("noul", "score"):
        x = float(value)  # type: ignore[arg-type]  # noul and score answers are numbers
        return all(bound(x, threshold) for bound, threshold in t.bounds)
    if kind == "choice":
        return value in t.options
    if kind == "set":
        return isinstance(value, frozenset) and t.label in value
    if kind == "span":
        return isinstance(value, frozenset) and (t.label in value if t.label is not None else bool(value))
    return value is True  # keyword


_BOUND: dict[str, Callable[[float, float], bool]] = {
    "above": lambda x, t: x > t,
    "at_least": lambda x, t: x >= t,
    "below": lambda x, t: x < t,
    "at_most": lambda x, t: x <= t,
}


def unknown_in(condition: Condition | Test | None, answers: Mapping[str, Answer]) -> tuple[str, ...]:
    if condition is None:
        return ()
    tested = condition.signals if isinstance(condition, Test) else signals_of(condition)
    return tuple(s for s in tested if (a := answers.get(s)) is None or a.value is None)


def skips(unknown: tuple[str, ...], signals: Mapping[str, Signal]) -> bool:
    """Whether a condition testing these unknown signals is passed over: it names one whose
    on_unknown is skip (whatever the other tests say, so the outcome never hangs on the order
    of ``any``)."""
    return any(signals[s].on_unknown == "skip" for s in unknown)


def decide(plan: VirtualModelPlan, answers: Mapping[str, Answer]) -> Decision:
    """The first route (in trying order) whose condition holds; else the default."""
    trace: list[RouteTrace] = []
    for position, ((_, route), test) in enumerate(zip(plan.routes, plan.tests, strict=True)):
        unknown = unknown_in(test, answers)
        if unknown and skips(unknown, plan.signals):
            trace.append(RouteTrace(route.name, "skipped", unknown))
            continue
        fired = test is None or _holds(test, plan.signals, answers)
        if fired:
            trace.append(RouteTrace(route.name, "fired", unknown))
            trace += [RouteTrace(later.name, "not tried") for _, later in plan.routes[position + 1 :]]
            return Decision(plan.name, route.name, route.models, route.rewrite, route.judge, tuple(trace))
        trace.append(RouteTrace(route.name, "no", unknown))
    models = (plan.default,) if plan.default is not None else ()
    return Decision(plan.name, None, models, None, None, tuple(trace))


__all__ = [
    "Answer",
    "DecidePlan",
    "Decision",
    "RouteTrace",
    "VirtualModelPlan",
    "Test",
    "compile_condition",
    "compile_plan",
    "compile_virtual_model",
    "condition_text",
    "decide",
    "holds",
    "keyword_answers",
    "signals_of",
    "skips",
]
