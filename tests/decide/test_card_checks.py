"""The sidecar checks every signal against its members' model cards when a config version
arrives and whenever a card changes (seed 002: at load, and when an attached runtime starts),
and logs one line per problem. In process: examples/decide.yaml's sidecar data, and a
``vllm-srun``-like member whose ``GET /v1/models`` card the test changes, as a restarted
runtime with another checkpoint would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from sr_control.card import card_of
from sr_control.extproc.cards import CardBook
from sr_control.extproc.decide import CardChecks
from sr_control.extproc.upstream import Http, Reply
from sr_control.extproc.versions import VersionStore
from tests.decide.test_sidecar_data import EXAMPLE, data_of

FULL = {
    "question_types": ["noul", "choice", "score", "span"],
    "presets": ["pii", "urgency"],
    "limits": {"max_options": 16, "max_labels": 16, "min_levels": 2, "max_levels": 10},
}
NO_PII = FULL | {"question_types": ["noul", "choice", "score"], "presets": ["urgency"]}
PII_LINE = (
    "signal 'pii' cannot be asked of 'vllm-sr/auto': deployment 'local-d3' lacks span questions and the pii "
    "preset (a span preset is answered only by a model that lists it)"
)


class Runtime(Http):
    """local-d3 as a vllm-srun serve answers for it: ready, contract 5.0.0, and ``card``."""

    def __init__(self, card: dict[str, Any]) -> None:
        super().__init__()
        self.card = card

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        timeout_s: float,
    ) -> Reply:
        if url.endswith("/health"):
            doc: dict[str, Any] = {"api_version": "5.0.0", "ready": True}
        else:
            doc = {"models": [{"name": "d3-turbo", "card": self.card}]}
        return Reply(200, (("content-type", "application/json"),), json.dumps(doc).encode())


def problems(logs: list[dict[str, Any]]) -> list[str]:
    return [e["problem"] for e in logs if e["event"] == "signal cannot be asked"]


def test_a_card_that_cannot_answer_a_signal_is_one_line_at_load_and_again_when_it_changes_back() -> None:
    data = data_of(EXAMPLE.read_text())
    member = data.members["local-d3"]

    async def main() -> list[list[str]]:
        runtime = Runtime(NO_PII)
        cards, store = CardBook(runtime), VersionStore()
        store.add(data)
        checks = CardChecks(store, cards)
        changed = asyncio.Event()

        def card_changed(m: Any) -> None:
            checks.card_changed(m)
            changed.set()

        cards.on_change = card_changed
        seen = []

        async def restart(card: dict[str, Any]) -> None:
            """The runtime comes back with another card; a failed call makes the sidecar look again."""
            runtime.card = card
            changed.clear()
            cards.failed(member, "connection refused")
            await asyncio.wait_for(changed.wait(), 10)

        with capture_logs() as logs:
            await checks.arrived(data)
            seen.append(problems(logs))
            checks.check(data)  # a look with nothing new logs nothing
            seen.append(problems(logs))
        with capture_logs() as logs:
            await restart(FULL)
            seen.append(problems(logs) + checks.check(data))
        with capture_logs() as logs:
            await restart(NO_PII)
            seen.append(problems(logs))
        return seen

    at_load, looked_again, full, back = asyncio.run(main())
    assert at_load == [PII_LINE]
    assert looked_again == [PII_LINE]  # not logged twice
    assert full == []
    assert back == [PII_LINE]


@pytest.mark.parametrize(
    "limits",
    [
        {"max_options": True, "max_labels": 0, "min_levels": -2, "max_levels": 7.0},
        {"max_options": "16", "max_labels": None, "max_levels": 12},
        ["max_options"],
    ],
)
def test_the_sidecar_reads_a_cards_limits_as_vllm_sr_route_does(limits: Any) -> None:
    """``true`` is no number and a limits list is no object: no limit, never a member down."""
    member = data_of(EXAMPLE.read_text()).members["local-d3"]
    card = FULL | {"limits": limits}
    state = asyncio.run(CardBook(Runtime(card)).get(member))
    listed = card_of(card)
    assert state.card is not None and listed is not None, state.error
    for name in ("max_options", "max_labels", "min_levels", "max_levels"):
        assert getattr(state.card.limits, name) == getattr(listed.limits, name), name
    assert state.card.limits.max_options is None
