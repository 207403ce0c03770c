"""What a request needs and what a member can answer: capability routing, as pure functions.

    needs = needs_of(ir)                       # question types, media, option counts, size
    lacks(needs, card) -> ("span questions", "image input", ...)   # () when the member can answer

A member is judged by its model card (``GET /v1/models``: question types, modalities, limits)
or, when it publishes none, by its deployment's declared ``capabilities`` (seed 000 rule 9).
``lacks`` says in words what is missing, so the 400 ``unsupported_capability`` a client gets
names, per member, why it was not chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from sr_control.card import Card
from systemone.generated.strip import REFUSE
from systemone.ir import MISSING, Batch, Request, items
from systemone.jsontext import strings

# Tokens are estimated from characters at 8 a token, half what English BPE averages, so the
# estimate stays below the real count: only a request that surely cannot fit is kept away
# from a member; the member itself refuses what it cannot read.
CHARS_PER_TOKEN_FLOOR = 8
CONTRACT_MAJOR = "5"  # the runtime contract this router speaks (GET /health api_version 5.0.0)


@dataclass(frozen=True)
class Needs:
    question_types: frozenset[str]
    modalities: frozenset[str]
    fields: frozenset[str]  # question extension fields a standard target cannot carry
    max_options: int = 0  # the largest choice (options) or set/span (labels) asked
    max_labels: int = 0
    levels: tuple[int, int] | None = None  # fewest and most score levels asked
    ir: Request | Batch | None = field(default=None, compare=False, repr=False)
    body_bytes: int = 0  # the request as sent: no more characters than this

    def fits(self, max_input_tokens: int) -> bool:
        """Whether the input may fit: the body's size decides at once for most requests, and
        only a body that could be too long has its text counted."""
        return self.body_bytes // CHARS_PER_TOKEN_FLOOR <= max_input_tokens or self.input_tokens <= max_input_tokens

    @cached_property
    def input_tokens(self) -> int:
        """A floor estimate of the state plus the longest question, in tokens."""
        if self.ir is None:
            return 0
        tokens = 0
        for _, request in items(self.ir):
            longest = max(
                (_chars(q.instructions) + _chars(q.criteria) for q in request.questions.values() if q.problem is None),
                default=0,
            )
            tokens = max(tokens, (_chars(request.state) + longest) // CHARS_PER_TOKEN_FLOOR)
        return tokens


def needs_of(ir: Request | Batch, body_bytes: int | None = None) -> Needs:
    """What ``ir`` needs; ``body_bytes`` (the body's size) spares counting the text of a request
    that plainly fits (None: always count)."""
    types: set[str] = set()
    modalities = {"text"}
    fields: set[str] = set()
    options = labels = 0
    fewest, most = 0, 0
    refused_fields = REFUSE["question"]
    for _, request in items(ir):
        for asset in request.assets.values():
            modalities.add(asset.type)
        for q in request.questions.values():
            if q.problem is not None:
                continue  # /v1/decisions: it fails on its own, wherever the request goes
            types.add(q.type)
            fields.update(f for f in q.extensions if f in refused_fields)
            criteria = q.criteria
            if q.type == "choice" and isinstance(criteria, dict):
                options = max(options, len(criteria))
            elif q.type == "score" and isinstance(criteria, (tuple, list)):
                n = len(criteria)
                fewest, most = (min(fewest, n) if fewest else n), max(most, n)
            elif q.type in ("set", "span") and isinstance(criteria, dict):
                labels = max(labels, len(criteria))
    return Needs(
        frozenset(types),
        frozenset(modalities),
        frozenset(fields),
        options,
        labels,
        (fewest, most) if most else None,
        ir,
        body_bytes if body_bytes is not None else 1 << 62,
    )


def lacks(needs: Needs, card: Card) -> tuple[str, ...]:
    """What ``card`` cannot answer of ``needs``, each in a few words; () when it can answer all."""
    out: list[str] = []
    if card.contract is not None and card.contract.split(".", 1)[0] != CONTRACT_MAJOR:
        return (f"runtime contract {card.contract} (this router speaks {CONTRACT_MAJOR}.0.0)",)
    missing = sorted(needs.question_types - card.question_types)
    if missing:
        out.append(f"{_words(missing)} questions")
    media = sorted(needs.modalities - card.modalities)
    if media:
        out.append(f"{_words(media)} input")
    if card.fields is not None:
        fields = sorted(needs.fields - card.fields)
        if fields:
            out.append(f"the question field{'s' if len(fields) > 1 else ''} {_words(fields)}")
    lim = card.limits
    if lim.max_options is not None and needs.max_options > lim.max_options:
        out.append(f"choice questions of {needs.max_options} options (it reads at most {lim.max_options})")
    max_labels = lim.max_labels if lim.max_labels is not None else lim.max_options
    if max_labels is not None and needs.max_labels > max_labels:
        out.append(f"{needs.max_labels} labels (it reads at most {max_labels})")
    if needs.levels is not None:
        fewest, most = needs.levels
        if (lim.min_levels is not None and fewest < lim.min_levels) or (
            lim.max_levels is not None and most > lim.max_levels
        ):
            asked = str(most) if fewest == most else f"{fewest} to {most}"
            out.append(f"score questions of {asked} levels (it reads {lim.min_levels}-{lim.max_levels})")
    if lim.max_input_tokens and not needs.fits(lim.max_input_tokens):
        out.append(f"an input of at least {needs.input_tokens} tokens (it reads at most {lim.max_input_tokens})")
    return tuple(out)


def _chars(value: object) -> int:
    if value is MISSING or value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    return sum(len(s) for s in strings(value))


def _words(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


__all__ = ["CHARS_PER_TOKEN_FLOOR", "Needs", "lacks", "needs_of"]
