"""``GET /v1/models`` and ``GET /v1/systemone/models`` on a listener.

``/v1/models`` lists only the models of the APIs the listener offers (seed 000): LLM models in
OpenAI's shape (``object: list``, ``data``), System One models in the standard's (``models``),
both in one body when both kinds are offered. ``/v1/systemone/models`` lists the System One
models alone, each with the question types and modalities it answers (seed 002): a pool answers
what its members answer, together.

On a vllm-sr/4.0 listener the System One listing also carries 4.0's ``data``. When that listener
offers LLM APIs too, ``data`` holds the LLM models and then the System One models, each entry
readable by both kinds of client (docs/systemone/decisions.md says why).
"""

from __future__ import annotations

import time
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from sr_control.card import Card, Limits
from sr_control.extproc.cards import CardState
from sr_control.extproc.data import SYSTEMONE_API, ListenerData
from sr_control.extproc.envoy import Answer
from sr_control.extproc.incoming import Incoming, Sidecar
from sr_control.extproc.read import listener_codec
from systemone import Listing, ListingItem
from systemone.generated.runtime_fields import RUNTIME_CONTRACT
from systemone.jsontext import JsonObject, dumpb, freeze
from systemone.replies import listing_doc

SYSTEMONE_MODELS_PATH = "/v1/systemone/models"
LISTING_VERSION = RUNTIME_CONTRACT.rsplit(".", 1)[0]  # "5.0"
_JSON = (("content-type", "application/json"),)


async def listing(sidecar: Sidecar, incoming: Incoming) -> Answer:
    data = incoming.data
    offer = data.systemone
    codec = listener_codec(offer)
    systemone = await _systemone_listing(sidecar, data) if offer is not None else None
    if incoming.path.split("?", 1)[0].rstrip("/") == SYSTEMONE_MODELS_PATH:
        return Answer(200, _JSON, codec.answer_listing(systemone or Listing(())))
    llm = _llm_entries(data)
    if systemone is None:
        return Answer(200, _JSON, dumpb(JsonObject([("object", "list"), ("data", tuple(llm))])))
    doc = listing_doc(systemone, codec.flavour)
    if not data.providers or not llm:
        return Answer(200, _JSON, dumpb(doc))
    members = [(k, v) for k, v in doc.items() if k != "data"]
    legacy = tuple(
        JsonObject([*e.items(), ("object", "model"), ("created", _created(data)), ("owned_by", "vllm-sr")])
        for e in doc.get("data", ())
    )
    return Answer(200, _JSON, dumpb(JsonObject([*members, ("object", "list"), ("data", (*llm, *legacy))])))


async def _systemone_listing(sidecar: Sidecar, data: ListenerData) -> Listing:
    offer = data.offers[SYSTEMONE_API]
    entries = []
    for model in offer.models:
        members = [data.members[m] for m in data.models.get(model, ())]
        states: list[CardState] = [sidecar.cards.current(m) or await sidecar.cards.get(m) for m in members]
        cards = [st.card for st in states if st.card is not None]
        types = sorted({t for c in cards for t in c.question_types})
        modalities = sorted({m for c in cards for m in c.modalities})
        if len(members) == 1 and states[0].description:
            description = states[0].description
        elif data.models.get(model) and len(members) > 1:
            names = ", ".join(m.name for m in members)
            description = f"{model}: {len(members)} members ({names}); each request goes to one able to answer it"
        else:
            description = f"{model} through listener {data.listener!r}"
        dates = [st.release_date for st in states if st.release_date]
        card: dict[str, Any] = {"question_types": types, "modalities": modalities}
        presets = sorted({p for c in cards for p in c.presets})
        card["presets"] = presets
        limits = _limits(cards)
        if limits:
            card["limits"] = limits
        extensions = freeze({"version": LISTING_VERSION, "features": types, "card": card})
        entries.append(ListingItem(model, description, max(dates) if dates else _date(data), extensions))
    return Listing(tuple(entries))


def _limits(cards: list[Card]) -> dict[str, int | None]:
    """The members' card limits, as each member lists them. A pool answers what its members
    answer together (each request goes to one able to): the largest ``max_*`` and the smallest
    ``min_*`` of the members that state one; None where a member states no bound."""
    out: dict[str, int | None] = {}
    listed = [dict(c.listed_limits) if c.listed_limits else _declared_limits(c.limits) for c in cards]
    for name in dict.fromkeys(k for limits in listed for k in limits):
        values = [limits.get(name) for limits in listed if name in limits]
        if any(v is None for v in values):
            out[name] = None
        else:
            bounds = [v for v in values if v is not None]
            out[name] = min(bounds) if name.startswith("min_") else max(bounds)
    return out


def _declared_limits(limits: Limits) -> dict[str, int | None]:
    return {f.name: getattr(limits, f.name) for f in fields(limits) if getattr(limits, f.name) is not None}


def _llm_entries(data: ListenerData) -> list[JsonObject]:
    names: dict[str, None] = {}
    for offer in data.offers.values():
        if offer.api != SYSTEMONE_API:
            # A virtual model (docs/decide/) is listed as any model the client may name.
            names.update(dict.fromkeys(m for m in offer.models if m in data.providers or m in data.virtual_models))
    return [
        JsonObject([("id", n), ("object", "model"), ("created", _created(data)), ("owned_by", "vllm-sr")])
        for n in names
    ]


def _created(data: ListenerData) -> int:
    """When this sidecar received the listener's config version (Unix seconds): an OpenAI
    listing needs a time, and no upstream was asked for one."""
    return int(time.time() - (time.monotonic() - data.received_at)) if data.received_at else 0


def _date(data: ListenerData) -> str:
    return datetime.fromtimestamp(_created(data), UTC).date().isoformat()


__all__ = ["SYSTEMONE_MODELS_PATH", "listing"]
