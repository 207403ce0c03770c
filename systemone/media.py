"""Reading assets and media: the standard's ``assets``, 4.0's inline ``images`` and ``videos``,
the internal form's ``media``, and the 5.0 media rule (image placeholders, then video
placeholders, then exactly one other element: read as that element, the media before it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from systemone.errors import DetailItem, loc_text
from systemone.found import Found, Loc, check_members
from systemone.generated import fields as F
from systemone.ir import Asset, Batch, Question, Request, items
from systemone.jsontext import strings
from systemone.rules import Reading

_IMG, _VID = "⟦img-{}⟧", "⟦vid-{}⟧"


def read_assets(doc: Mapping[str, Any], reading: Reading, found: Found, loc: Loc) -> tuple[Mapping[str, Asset], str]:
    inline = [k for k in ("images", "videos") if k in doc and k in reading.request_members]
    if inline and "assets" in doc:
        found.bad(loc + (inline[0],), "give assets or inline images and videos, not both", "value_error")
        return MappingProxyType({}), "assets"
    if inline:
        return _inline_assets(doc, inline, found, loc), "inline"
    raw = doc.get("assets")
    if raw is None:
        return MappingProxyType({}), "assets"
    at = loc + ("assets",)
    if not found.typed(at, "map<any>", raw, {"min_items": 1}):
        return MappingProxyType({}), "assets"
    assets: dict[str, Asset] = {}
    members = frozenset(F.STANDARD_ASSET)
    for placeholder, asset in raw.items():
        here = at + (placeholder,)
        if not placeholder:
            found.bad(here, "a placeholder must not be empty", "string_too_short")
        if not found.typed(here, "map<any>", asset):
            continue
        check_members(asset, members, here, reading, found)
        kind = asset.get("type", "image")
        if not isinstance(kind, str) or kind not in reading.asset_formats:
            found.bad(here + ("type",), f"must be one of {', '.join(reading.asset_formats)}", "enum")
            continue
        _asset_body(asset, reading.asset_formats[kind], found, here)
        assets[placeholder] = Asset(kind, asset)
    return MappingProxyType(assets), "assets"


def _asset_body(asset: Mapping[str, Any], formats: tuple[str, ...], found: Found, at: Loc) -> None:
    for name in ("data_base64", "part"):
        if name in asset:
            found.typed(at + (name,), "string?", asset[name])
    if asset.get("part") is None and asset.get("data_base64") is None:
        found.bad(at, "needs data_base64 or part", "missing")
    if asset.get("data_base64") is not None and asset.get("part") is None and "format" not in asset:
        found.bad(at + ("format",), "Field required with data_base64", "missing")
    if asset.get("format") is not None and asset["format"] not in formats:
        found.bad(at + ("format",), f"must be one of {', '.join(formats)}", "enum")


def _inline_assets(doc: Mapping[str, Any], members: Sequence[str], found: Found, loc: Loc) -> Mapping[str, Asset]:
    assets: dict[str, Asset] = {}
    for member in members:
        found.form(member)
        kind, formats = F.LEGACY_INLINE_MEDIA[member]
        pattern = _IMG if member == "images" else _VID
        at = loc + (member,)
        if not found.typed(at, "array<map<any>>", doc[member]):
            continue
        for i, item in enumerate(doc[member]):
            here = at + (i,)
            for name in item:
                if name not in ("format", "data_base64"):
                    found.unknown.append(loc_text(here + (name,)))
            found.typed(here + ("data_base64",), "string", item.get("data_base64"))
            if item.get("format") not in formats:
                found.bad(here + ("format",), f"must be one of {', '.join(formats)}", "enum")
            assets[pattern.format(i + 1)] = Asset(kind, item)
    return MappingProxyType(assets)


def media_split(state: Any, assets: Mapping[str, Asset]) -> tuple[tuple[str, ...], Any] | None:
    """Image placeholders, then video placeholders, then exactly one other element."""
    if not isinstance(state, tuple) or len(state) < 2 or not assets:
        return None
    i, n = 0, len(state) - 1
    for kind in ("image", "video"):
        while i < n and isinstance(state[i], str) and state[i] in assets and assets[state[i]].type == kind:
            i += 1
    if i != n:
        return None
    return tuple(state[:n]), state[n]


def read_media_member(raw: Any, assets: Mapping[str, Asset], found: Found, loc: Loc) -> tuple[str, ...]:
    at = loc + ("media",)
    if not found.typed(at, "array<string>", raw, {"min_items": 1}):
        return ()
    for i, placeholder in enumerate(raw):
        if placeholder not in assets:
            found.bad(at + (i,), f"{placeholder!r} is not an asset placeholder", "value_error")
    return tuple(raw)


def inline_media(
    state: Any, states: Any, questions: Mapping[str, Question], assets: Mapping[str, Asset]
) -> tuple[str, ...]:
    """4.0 inline media that nothing refers to are read before the state, images then videos."""
    texts = list(strings(states if states is not None else state))
    for q in questions.values():
        texts += strings(q.instructions)
        texts += strings(q.criteria)
    return tuple(p for p in assets if not any(p in t for t in texts))


# The multipart/form-data part that holds the JSON request; every other part is an asset that
# one asset's ``part`` names (system-one-standard.md §1.3). The sidecar and the runtime read it.
REQUEST_PART = "request"


def part_problems(ir: Request | Batch, parts: Collection[str]) -> list[DetailItem]:
    """A multipart body's parts against its assets: each asset's ``part`` names an uploaded
    part, and each uploaded part is claimed by exactly one asset (seed 002). One 422 detail
    item per problem, located; the runtime and the sidecar refuse the same bodies alike."""
    problems: list[DetailItem] = []
    claimed: dict[str, int] = {}
    for name, request in items(ir):
        at = ("body", "requests", name) if isinstance(ir, Batch) else ("body",)
        for placeholder, asset in request.assets.items():
            part = asset.members.get("part")
            if part is None:
                continue
            claimed[part] = claimed.get(part, 0) + 1
            if part not in parts:
                problems.append(
                    DetailItem(
                        (*at, "assets", placeholder, "part"), f"no multipart part is named {part!r}", "value_error"
                    )
                )
    for part in parts:
        count = claimed.get(part, 0)
        if count != 1:
            why = "no asset claims it" if count == 0 else f"{count} assets claim it"
            problems.append(
                DetailItem(("body", part), f"the multipart part {part!r}: {why} (exactly one must)", "value_error")
            )
    return problems
