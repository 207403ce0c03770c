"""The Decide path's whole-file rules: names, references, kinds and formats. Pure functions.

``check_decide`` is one of ``sr_control.config.checks.CHECKS``, so ``vllm-sr config validate``
reports each finding at its file:line:col; the card checks (``cards.py``) run there too, over
the cards the file declares.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sr_control.apis import REGISTRY, UnknownApiError
from sr_control.config.catalog import api_kind, catalog
from sr_control.config.errors import Loc
from sr_control.config.model import Condition, RouterConfig, Signal, check_criteria
from sr_control.decide.cards import card_problems, declared_cards
from sr_control.decide.request import LLM_APIS, kind_of
from sr_control.decide.rules import signals_of
from systemone.generated.fields import PRESETS

Finding = tuple[Loc, str]


def check_decide(config: RouterConfig, ignored: frozenset[str] = frozenset()) -> Iterator[Finding]:
    """``ignored``: names of entries that did not parse (reported already, not again as unknown)."""
    if not (config.signals or config.virtual_models or config.judges):
        return  # most files: nothing to look at, and no catalog to build on every reload
    yield from _signals(config, ignored)
    yield from _virtual_models(config, ignored)
    yield from _judges(config, ignored)
    if not any(True for _ in _references_broken(config)):
        yield from card_problems(config, declared_cards(config))


def options_of(signal: Signal) -> tuple[str, ...]:
    """A choice signal's options, a set or span signal's labels, a score signal's levels."""
    criteria: Any = signal.criteria
    if criteria is None:
        criteria = PRESETS.get(signal.preset or "", {}).get("criteria")
    if isinstance(criteria, (dict, list, tuple)):
        return tuple(str(c) for c in criteria)
    return ()


def formats_of(config: RouterConfig) -> dict[str, str]:
    """Each LLM provider model's API (its registered name)."""
    out = {}
    for m in config.providers.models:
        try:
            api = REGISTRY.get(m.api_format)
        except UnknownApiError:
            continue
        if api.kind == "llm":
            out[m.name] = api.name
    return out


def _signals(config: RouterConfig, ignored: frozenset[str]) -> Iterator[Finding]:
    decision = set(catalog(config).decision)
    for name, signal in config.signals.items():
        loc: Loc = ("signals", name)
        if signal.preset is not None:
            preset = PRESETS.get(signal.preset)
            if preset is None:
                yield loc + ("preset",), f"unknown preset {signal.preset!r} (presets: {', '.join(sorted(PRESETS))})"
                continue
            if signal.type is not None and signal.type != preset["type"]:
                yield loc + ("type",), f"preset {signal.preset!r} asks a {preset['type']} question, not {signal.type}"
            elif signal.criteria is not None:
                try:
                    check_criteria(str(preset["type"]), signal.criteria)
                except ValueError as exc:
                    yield loc + ("criteria",), f"{exc} (preset {signal.preset!r} asks a {preset['type']} question)"
        if not signal.asks_model:
            continue
        if signal.model not in decision and signal.model not in ignored:
            known = ", ".join(sorted(decision)) or "none defined"
            yield loc + ("model",), f"unknown decision model {signal.model!r} (decision models: {known})"
        policy = signal.on_unknown
        if isinstance(policy, str) and policy != "skip":
            if kind_of(signal) != "choice":
                yield (
                    loc + ("on_unknown",),
                    f"on_unknown {policy!r}: a default answer is for choice signals; use false, true or skip",
                )
            elif policy not in options_of(signal):
                yield (
                    loc + ("on_unknown",),
                    f"on_unknown {policy!r} is not an option of {name!r} ({', '.join(options_of(signal))})",
                )


def _virtual_models(config: RouterConfig, ignored: frozenset[str]) -> Iterator[Finding]:
    models = catalog(config)
    taken = set(models.decision) | {m.name for m in config.providers.models}
    formats = formats_of(config)
    decision = frozenset(models.decision)
    for vm_name, vm in config.virtual_models.items():
        loc: Loc = ("virtual_models", vm_name)
        if vm_name in taken:
            yield loc, f"model name {vm_name!r} is already a provider model, a pool or a deployment's model"
        seen: set[str] = set()
        used: dict[str, str] = {}  # target model -> its API
        for i, route in enumerate(vm.routes):
            here: Loc = loc + ("routes", i)
            if route.name in seen:
                yield here + ("name",), f"route name {route.name!r} is used twice in {vm_name!r}"
            seen.add(route.name)
            targets = [
                (here + ("model",) + ((j,) if isinstance(route.model, list) else ()), m)
                for j, m in enumerate(route.models)
            ]
            for where, target in targets:
                yield from _target(config, where, target, formats, ignored, used, decision)
            if route.when is not None:
                yield from _condition(config, here + ("when",), route.when, ignored, answer_ok=False)
            if route.judge is not None and route.judge not in config.judges and route.judge not in ignored:
                known = ", ".join(config.judges) or "none defined"
                yield here + ("judge",), f"unknown judge {route.judge!r} (judges: {known})"
            elif route.judge is not None and len(route.models) < 2:
                yield here + ("judge",), f"judge {route.judge!r} escalates to the route's next model, and it has one"
        if vm.default is not None:
            yield from _target(config, loc + ("default",), vm.default, formats, ignored, used, decision)
        apis = set(used.values())
        if len(apis) > 1:
            spoken = ", ".join(f"{m} ({a})" for m, a in used.items())
            yield (
                loc,
                f"{vm_name!r} routes to models of several APIs: {spoken}; "
                "the router does not translate between LLM formats",
            )


def _target(
    config: RouterConfig,
    loc: Loc,
    target: str,
    formats: Mapping[str, str],
    ignored: frozenset[str],
    used: dict[str, str],
    decision: frozenset[str] = frozenset(),
) -> Iterator[Finding]:
    if target in formats:
        used.setdefault(target, formats[target])
        if formats[target] not in LLM_APIS:
            yield loc, f"{target!r} speaks {formats[target]}; the Decide path routes {', '.join(LLM_APIS)} requests"
    elif target in decision:
        yield loc, f"{target!r} is a decision model; a route names the LLM models it sends to"
    elif target in config.virtual_models:
        yield loc, f"{target!r} is a virtual model; a route names the LLM models it sends to"
    elif target not in ignored and not any(
        m.name == target and api_kind(m.api_format) is None for m in config.providers.models
    ):
        known = ", ".join(formats) or "none defined"
        yield loc, f"unknown LLM model {target!r} (LLM models: {known})"


def _condition(
    config: RouterConfig, loc: Loc, c: Condition, ignored: frozenset[str], *, answer_ok: bool
) -> Iterator[Finding]:
    kind = c.kind
    if kind in ("all", "any"):
        for i, child in enumerate(c.all or c.any or ()):
            yield from _condition(config, loc + (kind, i), child, ignored, answer_ok=answer_ok)
        return
    if kind == "not":
        assert c.not_ is not None
        yield from _condition(config, loc + ("not",), c.not_, ignored, answer_ok=answer_ok)
        return
    name = c.signal
    assert name is not None
    signal = config.signals.get(name)
    if signal is None:
        if name not in ignored:
            known = ", ".join(config.signals) or "none defined"
            yield loc + (kind,), f"unknown signal {name!r} (signals: {known})"
        return
    if signal.preset is not None and signal.preset not in PRESETS:
        return  # reported where the signal is defined
    actual = kind_of(signal)
    if actual != kind:
        yield loc + (kind,), f"signal {name!r} is a {actual} signal; test it with {actual}:, not {kind}:"
        return
    if "answer" in signal.input and not answer_ok:
        yield (
            loc + (kind,),
            f"signal {name!r} reads the LLM's answer, which a route cannot know yet; test it in a judge",
        )
    options = options_of(signal)
    if kind == "choice":
        for option in c.options:
            if option not in options:
                yield loc + ("is",), f"{option!r} is not an option of {name!r} ({', '.join(options)})"
    elif kind == "set" and c.contains not in options:
        yield loc + ("contains",), f"{c.contains!r} is not a label of {name!r} ({', '.join(options)})"
    elif kind == "span" and c.label is not None and c.label not in options:
        yield loc + ("label",), f"{c.label!r} is not a label of {name!r} ({', '.join(options)})"
    elif kind in ("noul", "score"):
        top = 1.0 if kind == "noul" else float(len(options) - 1)
        for bound, value in c.bounds:
            if not 0.0 <= value <= top:
                what = (
                    "a probability, 0 to 1" if kind == "noul" else f"a level, 0 to {top:g} (its {len(options)} levels)"
                )
                yield loc + (bound,), f"{bound} {value:g} is outside the answer of {name!r}: {what}"


def _judges(config: RouterConfig, ignored: frozenset[str]) -> Iterator[Finding]:
    for name, judge in config.judges.items():
        yield from _condition(config, ("judges", name, "when"), judge.when, ignored, answer_ok=True)
        if not any("answer" in config.signals[s].input for s in signals_of(judge.when) if s in config.signals) and all(
            s in config.signals for s in signals_of(judge.when)
        ):
            yield ("judges", name, "when"), f"judge {name!r} tests no signal that reads the answer (input: [answer])"


def _references_broken(config: RouterConfig) -> Iterator[str]:
    """Names a route or judge refers to that do not exist (the card checks need them all)."""
    for vm in config.virtual_models.values():
        for route in vm.routes:
            yield from (s for s in signals_of(route.when) if s not in config.signals)
            if route.judge is not None and route.judge not in config.judges:
                yield route.judge
    for judge in config.judges.values():
        yield from (s for s in signals_of(judge.when) if s not in config.signals)
    yield from (s.preset for s in config.signals.values() if s.preset is not None and s.preset not in PRESETS)


__all__ = ["check_decide", "formats_of", "options_of"]
