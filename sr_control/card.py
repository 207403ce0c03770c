"""A member's model card: what it answers. Pure data and the reading of a listing.

    entry = listing_entry(doc, model)          # its entry in a GET /v1/models reply
    card = card_of(entry.get("card"), contract)  # None: the entry has no card

A vllm-sr runtime lists its card under ``GET /v1/models`` (question types, modalities, span
presets, limits); a deployment that publishes none is judged by its declared ``capabilities``,
and a systemone/0.2 one that declares nothing by ``STANDARD_CARD``. Capability routing
(``extproc/capability.py``) and the Decide path's signal checks (``decide/cards.py``) read the
same ``Card``, so the sidecar and ``vllm-sr route`` judge a member alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Limits:
    max_options: int | None = None
    max_labels: int | None = None
    min_levels: int | None = None
    max_levels: int | None = None
    max_input_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Card:
    """What one member answers, from its model card or its declared capabilities."""

    question_types: frozenset[str]
    modalities: frozenset[str] = frozenset({"text"})
    presets: frozenset[str] = frozenset()
    limits: Limits = Limits()
    fields: frozenset[str] | None = None  # None: every extension field; else the ones it takes
    contract: str | None = None  # GET /health api_version; None when not a vllm-sr runtime
    source: str = "card"  # card | declared | standard
    # The card's ``limits`` as the member listed them (media limits too), for the listener's own
    # listing; ``limits`` above holds the ones routing reads.
    listed_limits: tuple[tuple[str, int | None], ...] = ()


# A systemone/0.2 target that declares nothing: the standard's text questions, nothing else.
STANDARD_CARD = Card(frozenset({"noul", "choice", "score"}), fields=frozenset(), source="standard")


def listing_entry(doc: Any, model: str) -> dict[str, Any] | None:
    """``model``'s entry in a ``GET /v1/models`` reply, else its first (None: no entry)."""
    entries = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        return None
    named = [e for e in entries if isinstance(e, dict) and e.get("name") == model]
    first = entries[0] if isinstance(entries[0], dict) else None
    return named[0] if named else first


def card_of(doc: Any, contract: str | None = None) -> Card | None:
    """The card a listing entry gives under ``card`` (None: it gives none)."""
    if not isinstance(doc, Mapping) or "question_types" not in doc:
        return None
    given = doc.get("limits")
    limits: Mapping[str, Any] = given if isinstance(given, Mapping) else {}

    def limit(name: str) -> int | None:
        # A positive number, else no limit (``true`` is no number).
        value = limits.get(name)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None

    return Card(
        question_types=frozenset(doc.get("question_types") or ()),
        modalities=frozenset(doc.get("modalities") or ("text",)),
        presets=frozenset(doc.get("presets") or ()),
        limits=Limits(
            limit("max_options"),
            limit("max_labels"),
            limit("min_levels"),
            limit("max_levels"),
            limit("max_input_tokens"),
        ),
        contract=contract,
        listed_limits=tuple(
            (str(k), v if isinstance(v, int) and not isinstance(v, bool) else None) for k, v in limits.items()
        ),
    )


__all__ = ["STANDARD_CARD", "Card", "Limits", "card_of", "listing_entry"]
