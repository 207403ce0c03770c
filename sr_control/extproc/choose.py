"""Step 2 of a System One request's path (systemone_path.py): choose the members that may answer.

    ranking = await choose(pool, incoming, ir, body_bytes)
    ranking.capable       members able to answer, best first
    ranking.refused       member -> why it was passed over (what it lacks, or why it is down)

The model the request names (none, or the standard's alias: the listener's default) gives the
members; each is judged by its card (capability.py: question types, media, limits, size), then
the capable are ordered by the fewest calls open to them (pool.py), ties taking turns. A model
the listener does not serve is 404 ``unknown_model``; no capable member is 400 naming what each
lacks, or 503 when the only ones that could answer are down.

Before it: read (read.py), and on the Decide path (a later issue) decide.py, which hands this
step the System One request it built, its model already rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass

from sr_control.extproc.capability import lacks, needs_of
from sr_control.extproc.data import Member
from sr_control.extproc.incoming import Incoming
from sr_control.extproc.pool import Pool
from systemone import Batch, ProtocolError, Request
from systemone.errors import UnsupportedCapability
from systemone.ir import items


class UnknownModel(ProtocolError):
    reason = "unknown_model"


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


# A request not ranked yet (call.Call's default until this step ran).
NOT_RANKED = Ranking("", (), ())


async def choose(pool: Pool, incoming: Incoming, ir: Request | Batch, body_bytes: int) -> Ranking:
    """The members of the model ``ir`` names, ranked; raises the client's error when none can
    answer (``body_bytes``: the body's size, the first guess at whether the input fits)."""
    model, members = _members_of(incoming, ir)
    needs = needs_of(ir, body_bytes)
    cards = pool.cards
    capable: list[Member] = []
    refused: list[tuple[str, str]] = []
    down: set[str] = set()
    for member in members:
        # Known cards are read without awaiting; only a member never seen is waited for.
        state = cards.current(member) or await cards.get(member)
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
    turn = next(pool.turns)
    if not capable:
        raise Ranking(model, (), tuple(refused), frozenset(down)).error()
    open_calls = pool.open
    order = sorted(range(len(capable)), key=lambda i: (open_calls.get(capable[i].name, 0), (i - turn) % len(capable)))
    return Ranking(model, tuple(capable[i] for i in order), tuple(refused), frozenset(down))


def _members_of(incoming: Incoming, ir: Request | Batch) -> tuple[str, tuple[Member, ...]]:
    """The model ``ir`` names (its own, else its first request's) and that model's members."""
    asked = ir.model if ir.model is not None else next((r.model for _, r in items(ir) if r.model is not None), None)
    resolved = incoming.data.resolve(asked)
    if resolved is None:
        offer = incoming.data.systemone
        served = ", ".join(offer.models) if offer is not None else ""
        default = incoming.data.default_model()
        raise UnknownModel(
            f"Unknown model: {asked} (listener {incoming.listener!r} serves {served}; "
            f"'jev-latest' or no model mean {default})"
        )
    return resolved


__all__ = ["NOT_RANKED", "Ranking", "UnknownModel", "choose"]
