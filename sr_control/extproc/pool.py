"""What the sidecar keeps of its members between requests: calls open to each, and gates.

    pool.open             member name -> calls open to it now (read by choose.py's ranking)
    pool.turns            whose turn it is among equally loaded members
    with pool.calling(member): ...      a call the sidecar makes itself, counted while it runs
    pool.begin(member) / pool.end(member)   a call Envoy forwards, from the request to the reply
    pool.gate(member)     at most ``max_concurrency`` calls at once to a member the sidecar calls

Outstanding calls are counted per worker process: each worker routes its own share of the
requests, so its counts are a fair sample of the load.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from contextlib import contextmanager

from sr_control.extproc.cards import CardBook
from sr_control.extproc.data import Member


class Pool:
    def __init__(self, cards: CardBook) -> None:
        self.cards = cards
        self.open: dict[str, int] = {}
        self.turns = itertools.count()
        self._gates: dict[tuple[str, int], asyncio.Semaphore] = {}

    @contextmanager
    def calling(self, member: Member) -> Iterator[None]:
        """Count a call as open while it runs."""
        self.open[member.name] = self.open.get(member.name, 0) + 1
        try:
            yield
        finally:
            self.open[member.name] -= 1

    def begin(self, member: Member) -> None:
        self.open[member.name] = self.open.get(member.name, 0) + 1

    def end(self, member: Member) -> None:
        self.open[member.name] = max(0, self.open.get(member.name, 0) - 1)

    def gate(self, member: Member) -> asyncio.Semaphore:
        """At most ``max_concurrency`` calls at once to a member the sidecar calls itself."""
        key = (member.name, member.max_concurrency)
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = asyncio.Semaphore(member.max_concurrency)
        return gate

    def open_calls(self) -> dict[str, int]:
        return {k: v for k, v in self.open.items() if v}


__all__ = ["Pool"]
