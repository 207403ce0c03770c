"""Everything wrong with one request body, gathered before anything is raised."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from systemone import fieldtypes
from systemone.errors import DetailItem, loc_text
from systemone.rules import Reading

Loc = tuple[str | int, ...]


@dataclass
class Found:
    """Everything wrong with one body, gathered before anything is raised."""

    unknown: list[str] = field(default_factory=list)
    items: list[DetailItem] = field(default_factory=list)
    forms: list[str] = field(default_factory=list)

    def bad(self, loc: Loc, msg: str, kind: str, ctx: dict[str, Any] | None = None) -> None:
        self.items.append(DetailItem(loc, msg, kind, ctx))

    def form(self, name: str) -> None:
        if name not in self.forms:
            self.forms.append(name)

    def typed(self, loc: Loc, type_: str, value: Any, bounds: Mapping[str, Any] | None = None) -> bool:
        if fieldtypes.valid(type_, value, bounds):
            return True
        found = fieldtypes.problems(type_, value, bounds)
        for at, msg, kind in found:
            ctx = limit_ctx(kind, bounds)
            self.bad(loc + at, msg, kind, ctx)
        return not found


def limit_ctx(kind: str, bounds: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if bounds and kind == "too_short":
        return {"min_length": bounds["min_items"]}
    if bounds and kind == "too_long":
        return {"max_length": bounds["max_items"]}
    return None


def check_members(
    doc: Mapping[str, Any], allowed: frozenset[str], loc: Loc, reading: Reading, found: Found, why: str = ""
) -> None:
    for name in doc:
        if name in allowed:
            continue
        if reading.ignore_unknown and name not in reading.refused:
            continue
        found.unknown.append(loc_text(loc + (name,)) + why)
