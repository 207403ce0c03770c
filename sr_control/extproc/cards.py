"""Members' model cards: fetched at first use, refreshed on an interval and after a failure.

A vllm-sr/5.0 member (a ``vllm-srun serve``) publishes its card in ``GET /v1/models`` and its
contract in ``GET /health`` (``api_version``); the router refuses a runtime of another contract
(seed 002). A member that publishes no card, and every systemone/0.2 target (the standard has
no cards), is judged by its deployment's declared ``capabilities``; a 0.2 target that declares
none is taken to answer the standard's text questions (noul, choice, score).

A card older than the refresh interval is still used while its refresh runs in the background,
so a request never waits on a refresh; only a member seen for the first time is waited for,
at most the call timeout. A member whose card cannot be fetched is *down* until a refresh
succeeds: routing skips it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sr_base.log import get_logger
from sr_control.card import STANDARD_CARD, Card, card_of, listing_entry
from sr_control.extproc.auth import KeysUnavailable, upstream_key
from sr_control.extproc.data import Member
from sr_control.extproc.upstream import CallFailed, Http

REFRESH_S = 30.0
RETRY_S = 1.0  # how soon a failed fetch is tried again
TIMEOUT_S = 2.0
_log = get_logger("vllm_sr.extproc.cards")


@dataclass(frozen=True, slots=True)
class CardState:
    card: Card | None  # None: the member is down
    error: str | None = None
    fetched_at: float = 0.0
    description: str = ""
    release_date: str = ""
    healthy: bool = True


class CardBook:
    def __init__(
        self,
        http: Http,
        *,
        refresh_s: float = REFRESH_S,
        timeout_s: float = TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.http = http
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._states: dict[tuple[Any, ...], CardState] = {}
        self._fetching: dict[tuple[Any, ...], asyncio.Task[CardState]] = {}
        self._names: dict[tuple[Any, ...], str] = {}
        # Called with a member whose card arrived or changed (the Decide path checks its signals).
        self.on_change: Callable[[Member], None] | None = None

    @staticmethod
    def _key(m: Member) -> tuple[Any, ...]:
        return (m.name, m.endpoints, m.model, m.schema, m.api_key_env, m.declared)

    def current(self, member: Member) -> CardState | None:
        """What is known of the member now (None: never fetched); starts a refresh when stale."""
        if member.schema != "vllm-sr/5.0":
            return self._declared(member)
        key = self._key(member)
        state = self._states.get(key)
        if state is not None and self._clock() - state.fetched_at > (
            self.refresh_s if state.card is not None else RETRY_S
        ):
            self._start(key, member)  # in the background; this request uses what is known
        return state

    async def get(self, member: Member) -> CardState:
        state = self.current(member)
        return state if state is not None else await self._fetch(self._key(member), member)

    def failed(self, member: Member, why: str) -> None:
        """A call to the member failed: mark it down and look again soon."""
        key = self._key(member)
        old = self._states.get(key)
        if member.schema != "vllm-sr/5.0" or old is None:
            return
        self._states[key] = CardState(
            old.card, why, self._clock() - self.refresh_s, old.description, old.release_date, healthy=False
        )
        self._start(key, member)

    def states(self) -> dict[str, CardState]:
        return {self._names.get(k, k[0]): s for k, s in self._states.items()}

    async def refresh_all(self, members: Mapping[str, Member]) -> None:
        """Fetch the cards of members not seen yet (at start, after a config change)."""
        fresh = [m for m in members.values() if m.schema == "vllm-sr/5.0" and self._key(m) not in self._states]
        await asyncio.gather(*(self._fetch(self._key(m), m) for m in fresh))

    def _declared(self, member: Member) -> CardState:
        d = member.declared
        if d is None:
            return CardState(
                STANDARD_CARD if member.schema == "systemone/0.2" else None,
                "publishes no card and declares no capabilities",
            )
        fields: frozenset[str] | None = frozenset() if member.schema == "systemone/0.2" else None
        return CardState(Card(d.question_types, d.modalities, d.presets, fields=fields, source="declared"))

    def _start(self, key: tuple[Any, ...], member: Member) -> None:
        if key not in self._fetching:
            self._fetching[key] = asyncio.ensure_future(self._fetch_now(key, member))

    async def _fetch(self, key: tuple[Any, ...], member: Member) -> CardState:
        self._start(key, member)
        return await asyncio.shield(self._fetching[key])

    async def _fetch_now(self, key: tuple[Any, ...], member: Member) -> CardState:
        self._names[key] = member.name
        try:
            state = await self._read(member)
        except Exception as exc:  # noqa: BLE001 - any failure makes the member down, never the sidecar
            state = CardState(
                None, f"model card of {member.name!r} unreadable: {type(exc).__name__}: {exc}", self._clock()
            )
        finally:
            self._fetching.pop(key, None)
        old = self._states.get(key)
        if old is None or (old.card is None) != (state.card is None) or old.healthy != state.healthy:
            _log.info(
                "member card",
                member=member.name,
                down=state.error,
                question_types=sorted(state.card.question_types) if state.card else None,
            )
        self._states[key] = state
        if self.on_change is not None and state.card is not None and (old is None or old.card != state.card):
            self.on_change(member)
        return state

    async def _read(self, member: Member) -> CardState:
        now = self._clock()
        try:
            key = upstream_key(member.api_key_env)
        except KeysUnavailable as exc:
            return CardState(None, str(exc), now)
        headers = {"accept": "application/json"} | ({"authorization": f"Bearer {key}"} if key else {})
        try:
            health, listing = await asyncio.gather(
                self.http.request(
                    "GET", member.origin + member.path("/health"), headers=headers, timeout_s=self.timeout_s
                ),
                self.http.request(
                    "GET", member.origin + member.path("/v1/models"), headers=headers, timeout_s=self.timeout_s
                ),
            )
        except CallFailed as exc:
            return CardState(None, f"unreachable: {exc}", now)
        contract = None
        if health.status in (200, 503):
            doc = _json(health.body)
            contract = doc.get("api_version") if isinstance(doc, dict) else None
            if health.status == 503 or (isinstance(doc, dict) and doc.get("ready") is False):
                return CardState(
                    None, f"not ready ({doc.get('status', 'loading') if isinstance(doc, dict) else 'loading'})", now
                )
        if listing.status != 200:
            return CardState(None, f"GET /v1/models answered {listing.status}", now)
        entry = listing_entry(_json(listing.body), member.model)
        if entry is None:
            return CardState(None, f"GET /v1/models does not list {member.model!r}", now)
        card = card_of(entry.get("card"), contract)
        if card is None:
            card = self._declared(member).card
            if card is None:
                return CardState(None, "its listing has no card and its deployment declares no capabilities", now)
        return CardState(card, None, now, str(entry.get("description", "")), str(entry.get("release_date", "")))


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


__all__ = ["CardBook", "CardState", "REFRESH_S"]
