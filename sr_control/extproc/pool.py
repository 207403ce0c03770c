"""Choosing the member that answers: capable first, then the one with the fewest calls open.

    ranking = await pool.rank(model, members, needs)
    ranking.capable       members able to answer, best first
    ranking.refused       member -> why it was passed over (what it lacks, or why it is down)

Outstanding calls are counted per worker process: each worker routes its own share of the
requests, so its counts are a fair sample of the load.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sr_control.extproc.capability import Needs, lacks
from sr_control.extproc.cards import CardBook
from sr_control.extproc.data import Member
from systemone.errors import ProtocolError, UnsupportedCapability


@dataclass(frozen=True, slots=True)
class Ranking:
    model: str
    capable: tuple[Member, ...]
    refused: tuple[tuple[str, str], ...]  # (member, why), in config order
    down: frozenset[str] = frozenset()

    def error(self) -> ProtocolError:
        """What the client gets when no member is capable: 400 naming what each lacks, or 503
        when the only members that could answer are down."""
        why = "; ".join(f"{name}: {reason}" for name, reason in self.refused) or "it has no members"
        if self.refused and all(name in self.down for name, _ in self.refused):
            return ProtocolError(
                f"no member of {self.model!r} is available: {why}",
                status=503,
                code="unavailable",
                error_type="overloaded_error",
                reason="no_member_available",
                retry_after=1.0,
            )
        return UnsupportedCapability(f"no member of {self.model!r} can answer this request: {why}")


class Pool:
    def __init__(self, cards: CardBook) -> None:
        self.cards = cards
        self._open: dict[str, int] = {}
        self._gates: dict[tuple[str, int], asyncio.Semaphore] = {}
        self._turn = itertools.count()

    async def rank(
        self, model: str, members: Sequence[Member], needs: Needs, exclude: frozenset[str] = frozenset()
    ) -> Ranking:
        capable: list[Member] = []
        refused: list[tuple[str, str]] = []
        down: set[str] = set()
        for member in members:
            if member.name in exclude:
                continue
            # Known cards are read without awaiting; only a member never seen is waited for.
            state = self.cards.current(member) or await self.cards.get(member)
            if state.card is None or not state.healthy:
                refused.append((member.name, f"down ({state.error})"))
                down.add(member.name)
                continue
            missing = lacks(needs, state.card)
            if missing:
                refused.append((member.name, "cannot answer " + ", ".join(missing)))
            else:
                capable.append(member)
        # Fewest open calls first; ties take turns, so equal members share the load.
        turn = next(self._turn)
        order = sorted(
            range(len(capable)), key=lambda i: (self._open.get(capable[i].name, 0), (i - turn) % len(capable))
        )
        return Ranking(model, tuple(capable[i] for i in order), tuple(refused), frozenset(down))

    @contextmanager
    def calling(self, member: Member) -> Iterator[None]:
        """Count a call as open while it runs."""
        self._open[member.name] = self._open.get(member.name, 0) + 1
        try:
            yield
        finally:
            self._open[member.name] -= 1

    def begin(self, member: Member) -> None:
        self._open[member.name] = self._open.get(member.name, 0) + 1

    def end(self, member: Member) -> None:
        self._open[member.name] = max(0, self._open.get(member.name, 0) - 1)

    def gate(self, member: Member) -> asyncio.Semaphore:
        """At most ``max_concurrency`` calls at once to a member the sidecar calls itself."""
        key = (member.name, member.max_concurrency)
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = asyncio.Semaphore(member.max_concurrency)
        return gate

    def open_calls(self) -> dict[str, int]:
        return {k: v for k, v in self._open.items() if v}


__all__ = ["Pool", "Ranking"]
