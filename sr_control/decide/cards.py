"""Every signal against the model cards of the members that would answer it. Pure functions.

    card_problems(config, cards) -> [(loc, line)]    one line per signal a model cannot answer

``cards`` maps a deployment's name to what it answers (``sr_control/card.py``): its model card
(``GET /v1/models``) or its declared ``capabilities``; a deployment missing from it is not known yet and not judged.
``vllm-sr config validate`` passes ``declared_cards(config)`` (what the file itself says); the
sidecar runs ``plan_problems`` over the plans and cards it holds when a config version arrives
and whenever a member's card changes (seed 002: at load, and when an attached runtime starts).

What is checked (seed 002's table): the signal's question type; a span preset (pii, halu) must
be on the card, since only the model's own head answers it; image or video input needs the
modality; options, labels and levels within the card's limits. A pool is fine when one member
answers; the signals one call asks of a pool must all be answered by one member, since the call
goes to one member whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial

from sr_control.card import STANDARD_CARD, Card
from sr_control.config.errors import Loc
from sr_control.config.model import RouterConfig, Signal
from sr_control.decide.request import kind_of
from sr_control.decide.rules import VirtualModelPlan, compile_virtual_model
from systemone.generated.fields import PRESETS


def declared_cards(config: RouterConfig) -> dict[str, Card]:
    """The cards the file itself gives: declared ``capabilities``, and the standard's for a
    systemone/0.2 deployment that declares none. A vllm-sr/5.0 deployment's card comes from
    the runtime, so it is missing here."""
    out: dict[str, Card] = {}
    for name, dep in config.deployments.items():
        if dep.capabilities is not None:
            c = dep.capabilities
            out[name] = Card(
                frozenset(c.question_types), frozenset(c.modalities), frozenset(c.presets), source="declared"
            )
        elif dep.schema_ == "systemone/0.2":
            out[name] = STANDARD_CARD
    return out


def members_of(config: RouterConfig, model: str) -> tuple[str, ...]:
    """The deployments that answer for a decision model name: a pool's members, or the
    deployments serving that model; () for a provider model (no card)."""
    if model in config.pools:
        return tuple(config.pools[model].members)
    return tuple(name for name, dep in config.deployments.items() if dep.model == model)


def lacks(signal: Signal, card: Card) -> list[str]:
    """What ``card`` lacks to answer ``signal``, each in a few words; [] when it answers it."""
    kind = kind_of(signal)
    out: list[str] = []
    if kind not in card.question_types:
        out.append(f"{kind} questions")
    preset = PRESETS.get(signal.preset or "")
    if preset is not None and preset["type"] == "span" and signal.preset not in card.presets:
        out.append(f"the {signal.preset} preset (a span preset is answered only by a model that lists it)")
    for media in ("image", "video"):
        if media in signal.input and media not in card.modalities:
            out.append(f"{media} input")
    criteria = signal.criteria if signal.criteria is not None else (preset or {}).get("criteria")
    n = len(criteria) if isinstance(criteria, (dict, list)) else 0
    lim = card.limits
    if kind == "choice" and lim.max_options is not None and n > lim.max_options:
        out.append(f"{n} options (it reads at most {lim.max_options})")
    max_labels = lim.max_labels if lim.max_labels is not None else lim.max_options
    if kind in ("set", "span") and max_labels is not None and n > max_labels:
        out.append(f"{n} labels (it reads at most {max_labels})")
    if kind == "score" and (
        (lim.min_levels is not None and n < lim.min_levels) or (lim.max_levels is not None and n > lim.max_levels)
    ):
        out.append(f"{n} levels (it reads {lim.min_levels}-{lim.max_levels})")
    return out


def card_problems(config: RouterConfig, cards: Mapping[str, Card | None]) -> list[tuple[Loc, str]]:
    """One line per signal no member of its model can answer, then one per call that no single
    member can answer whole; signals whose members are not all known are not judged."""
    plans = {}
    for vm_name, vm in config.virtual_models.items():
        try:
            plans[vm_name] = compile_virtual_model(vm_name, vm, config.signals, config.judges)
        except KeyError:
            continue  # a route names a signal or judge that does not exist: reported on its own
    members = partial(members_of, config)
    return list(_signal_problems(config.signals, members, cards)) + list(_call_problems(plans, members, cards))


def plan_problems(
    plans: Mapping[str, VirtualModelPlan],
    members: Callable[[str], Sequence[str]],
    cards: Mapping[str, Card | None],
) -> list[str]:
    """``card_problems`` over compiled plans, as the sidecar holds them: the signals the plans
    ask, ``members(model)`` the members that answer for a decision model, ``cards`` each
    member's card (None or absent: not known yet)."""
    signals = {name: s for plan in plans.values() for name, s in (*plan.signals.items(), *plan.judge_signals.items())}
    found = [*_signal_problems(signals, members, cards), *_call_problems(plans, members, cards)]
    return [line for _, line in found]


def _verdicts(members: Sequence[str], signal: Signal, cards: Mapping[str, Card | None]) -> dict[str, list[str]] | None:
    """member -> what it lacks, or None when some member's card is not known."""
    out: dict[str, list[str]] = {}
    for member in members:
        card = cards.get(member)
        if card is None:
            return None
        out[member] = lacks(signal, card)
    return out or None


def _signal_problems(
    signals: Mapping[str, Signal], members: Callable[[str], Sequence[str]], cards: Mapping[str, Card | None]
) -> Iterator[tuple[Loc, str]]:
    for name, signal in signals.items():
        if not signal.asks_model:
            continue
        verdicts = _verdicts(members(signal.model), signal, cards)
        if verdicts is None or any(not missing for missing in verdicts.values()):
            continue
        yield ("signals", name), f"signal {name!r} cannot be asked of {signal.model!r}: {_who_lacks(verdicts)}"


def _call_problems(
    plans: Mapping[str, VirtualModelPlan],
    members: Callable[[str], Sequence[str]],
    cards: Mapping[str, Card | None],
) -> Iterator[tuple[Loc, str]]:
    for vm_name, plan in plans.items():
        for group in (plan.signals, plan.judge_signals):
            by_model: dict[str, list[str]] = {}
            for name, signal in group.items():
                if signal.asks_model:
                    by_model.setdefault(signal.model, []).append(name)
            for model, names in by_model.items():
                if len(names) < 2:
                    continue
                verdicts = [_verdicts(members(model), group[n], cards) for n in names]
                if any(v is None for v in verdicts):
                    continue
                each = [v for v in verdicts if v is not None]
                if any(all(missing for missing in v.values()) for v in each):
                    continue  # a signal no member answers is reported on its own
                whole = {m: [w for v in each for w in v[m]] for m in each[0]}
                if all(whole.values()):
                    yield (
                        ("virtual_models", vm_name),
                        f"signals {', '.join(names)} go to {model!r} in one call, and no member answers them all: "
                        f"{_who_lacks(whole)}",
                    )


def _who_lacks(verdicts: Mapping[str, list[str]]) -> str:
    parts = [f"deployment {m!r} lacks {_words(list(dict.fromkeys(w)))}" for m, w in verdicts.items()]
    return "; ".join(parts)


def _words(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


__all__ = ["card_problems", "declared_cards", "lacks", "members_of", "plan_problems"]
