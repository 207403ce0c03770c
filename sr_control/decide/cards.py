"""Every signal against the model cards of the members that would answer it. Pure functions.

    card_problems(config, cards) -> [(loc, line)]    one line per signal a model cannot answer

``cards`` maps a deployment's name to what it answers: its model card (``GET /v1/models``) or
its declared ``capabilities``; a deployment missing from it is not known yet and not judged.
``vllm-sr config validate`` passes ``declared_cards(config)`` (what the file itself says); the
sidecar runs ``plan_problems`` over the plans and cards it holds when a config version arrives
and whenever a member's card changes (seed 002: at load, and when an attached runtime starts).
The extproc's ``Card`` fits ``CardView`` as it is.

What is checked (seed 002's table): the signal's question type; a span preset (pii, halu) must
be on the card, since only the model's own head answers it; image or video input needs the
modality; options, labels and levels within the card's limits. A pool is fine when one member
answers; the signals one call asks of a pool must all be answered by one member, since the call
goes to one member whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from sr_control.config.errors import Loc
from sr_control.config.model import RouterConfig, Signal
from sr_control.decide.request import kind_of
from sr_control.decide.rules import VirtualModelPlan, compile_virtual_model
from systemone.generated.fields import PRESETS


class LimitsView(Protocol):
    @property
    def max_options(self) -> int | None: ...
    @property
    def max_labels(self) -> int | None: ...
    @property
    def min_levels(self) -> int | None: ...
    @property
    def max_levels(self) -> int | None: ...


class CardView(Protocol):
    @property
    def question_types(self) -> frozenset[str]: ...
    @property
    def modalities(self) -> frozenset[str]: ...
    @property
    def presets(self) -> frozenset[str]: ...
    @property
    def limits(self) -> LimitsView: ...


@dataclass(frozen=True, slots=True)
class Limits:
    max_options: int | None = None
    max_labels: int | None = None
    min_levels: int | None = None
    max_levels: int | None = None


@dataclass(frozen=True, slots=True)
class Card:
    """What a deployment answers, as a card or its declared capabilities say."""

    question_types: frozenset[str]
    modalities: frozenset[str] = frozenset({"text"})
    presets: frozenset[str] = frozenset()
    limits: Limits = Limits()


# A systemone/0.2 deployment that declares nothing: the standard's text questions (as the
# sidecar's capability routing takes it).
STANDARD_CARD = Card(frozenset({"noul", "choice", "score"}))


def declared_cards(config: RouterConfig) -> dict[str, Card]:
    """The cards the file itself gives: declared ``capabilities``, and the standard's for a
    systemone/0.2 deployment that declares none. A vllm-sr/5.0 deployment's card comes from
    the runtime, so it is missing here."""
    out: dict[str, Card] = {}
    for name, dep in config.deployments.items():
        if dep.capabilities is not None:
            c = dep.capabilities
            out[name] = Card(frozenset(c.question_types), frozenset(c.modalities), frozenset(c.presets))
        elif dep.schema_ == "systemone/0.2":
            out[name] = STANDARD_CARD
    return out


def card_from_listing(entry: Mapping[str, Any]) -> Card | None:
    """A model's card from its ``GET /v1/models`` entry (None: the entry has none)."""
    doc = entry.get("card")
    if not isinstance(doc, Mapping) or "question_types" not in doc:
        return None
    limits = limits_of(doc)
    return Card(
        frozenset(doc.get("question_types") or ()),
        frozenset(doc.get("modalities") or ("text",)),
        frozenset(doc.get("presets") or ()),
        Limits(
            limit(limits, "max_options"),
            limit(limits, "max_labels"),
            limit(limits, "min_levels"),
            limit(limits, "max_levels"),
        ),
    )


def limits_of(card: Mapping[str, Any]) -> Mapping[str, Any]:
    """A listed card's ``limits`` object ({} where it has none or it is not an object)."""
    given = card.get("limits")
    return given if isinstance(given, Mapping) else {}


def limit(limits: Mapping[str, Any], name: str) -> int | None:
    """One limit of a listed card: a positive number, else no limit (``true`` is no number)."""
    value = limits.get(name)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def members_of(config: RouterConfig, model: str) -> tuple[str, ...]:
    """The deployments that answer for a decision model name: a pool's members, or the
    deployments serving that model; () for a provider model (no card)."""
    if model in config.pools:
        return tuple(config.pools[model].members)
    return tuple(name for name, dep in config.deployments.items() if dep.model == model)


def lacks(signal: Signal, card: CardView) -> list[str]:
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


def card_problems(config: RouterConfig, cards: Mapping[str, CardView | None]) -> list[tuple[Loc, str]]:
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
    cards: Mapping[str, CardView | None],
) -> list[str]:
    """``card_problems`` over compiled plans, as the sidecar holds them: the signals the plans
    ask, ``members(model)`` the members that answer for a decision model, ``cards`` each
    member's card (None or absent: not known yet)."""
    signals = {name: s for plan in plans.values() for name, s in (*plan.signals.items(), *plan.judge_signals.items())}
    found = [*_signal_problems(signals, members, cards), *_call_problems(plans, members, cards)]
    return [line for _, line in found]


def _verdicts(
    members: Sequence[str], signal: Signal, cards: Mapping[str, CardView | None]
) -> dict[str, list[str]] | None:
    """member -> what it lacks, or None when some member's card is not known."""
    out: dict[str, list[str]] = {}
    for member in members:
        card = cards.get(member)
        if card is None:
            return None
        out[member] = lacks(signal, card)
    return out or None


def _signal_problems(
    signals: Mapping[str, Signal], members: Callable[[str], Sequence[str]], cards: Mapping[str, CardView | None]
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
    cards: Mapping[str, CardView | None],
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


__all__ = [
    "STANDARD_CARD",
    "Card",
    "CardView",
    "Limits",
    "card_from_listing",
    "card_problems",
    "declared_cards",
    "lacks",
    "limit",
    "limits_of",
    "plan_problems",
]
