"""``vllm-srun serve`` under bad input: hypothesis bodies, headers, content types and encodings;
bodies over 32 MiB (declared, chunked, in a multipart part, zstd-decoded, 4 GiB zstd bombs);
multipart bodies missing parts; bodies cut short. No crash, no 5xx but the documented 503, 504
and 529, and the server answers as before afterwards.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from sr_runtime.engine import Engine
from sr_runtime.loader import load_engine
from sr_runtime.server import ServerSettings
from sr_runtime.types import DecisionRequest, ModelCard, Result
from tests.reliability.runtime_scenarios import Tuned, bad_input, metrics_statuses
from tests.runtime_server.conftest import engine_loader, serving

pytestmark = pytest.mark.timeout(120)


def test_bad_input_never_gets_an_undocumented_5xx_and_the_server_lives_on(tuned: Tuned) -> None:
    counted = metrics_statuses(tuned)
    r = bad_input(tuned, examples=150)
    assert r.failures == [], [(f.case, f.status, f.error, f.body[:200]) for f in r.failures]
    assert r.alive
    by_case = {a.case: a for a in r.answers}
    for case in (
        "over 32 MiB, declared",
        "over 32 MiB, chunked",
        "over 32 MiB, a multipart part",
        "zstd over 32 MiB decoded",
        "zstd bomb, 4 GiB decoded",
        "zstd bomb in a multipart body",
    ):
        assert by_case[case].status == 413 and json.loads(by_case[case].body)["code"] == "request_too_large", case
    for case in (
        "multipart, no request part",
        "multipart, the asset's part missing",
        "multipart, a part nobody claims",
    ):
        assert by_case[case].status == 422, case
    # JSON nested past Python's recursion limit: bad bodies, not 500s
    for case in ("arrays 100,000 deep", "a state 490 arrays deep"):
        assert by_case[case].status == 422 and json.loads(by_case[case].body)["detail"][0]["type"] == "json_invalid", (
            case
        )
    # deadline_ms has no maximum: 400 digits is a valid deadline, honoured as the longest one
    assert by_case["a number of 400 digits"].status == 200
    # A bomb is refused on what it decodes to so far, never decoded whole: 4 GiB would show here.
    assert r.rss_peak - r.rss_before < 512 * 2**20, (r.rss_before, r.rss_peak)
    # A client that went away mid-body gets nothing, and is not counted as an error of ours.
    now = metrics_statuses(tuned)
    assert now["500"] == counted["500"] == 0
    assert now["499"] - counted["499"] == sum(1 for a in r.answers if a.case.startswith("cut short"))


class RecursingEngine:
    """The real engine, except that answering recurses until Python stops it: a bug deep enough
    that its traceback is a thousand frames."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name, self.max_length, self.state_cache = engine.name, engine.max_length, engine.state_cache

    def card(self) -> ModelCard:
        return self.engine.card()

    def answer_batch(self, requests: list[DecisionRequest], depth: int = 0) -> list[Result]:
        return self.answer_batch(requests, depth + 1)


def test_an_unexpected_error_with_a_deep_traceback_is_logged_as_plain_text_and_holds_nothing_up(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Logged with exc_info, the console renderer drew this traceback with rich, locals and all,
    # on the event loop: minutes during which the server answered nothing (the timeout shows it).
    engine = RecursingEngine(load_engine(str(tiny)))
    with serving(ServerSettings(str(tiny)), engine_loader(engine)) as client:  # type: ignore[arg-type]
        answers: list[int] = []
        failing = threading.Thread(
            target=lambda: answers.append(
                client.post(
                    "/v1/systemone", json={"state": "x", "questions": {"q": {"type": "noul", "instructions": "y"}}}
                ).status_code
            )
        )
        failing.start()
        failing.join(60)
        assert answers == [500]
        assert client.get("/health").status_code == 200
    log = "".join(capsys.readouterr())
    assert "internal error" in log and "Traceback (most recent call last)" in log and "RecursionError" in log
    assert "╭" not in log  # plain text, not a rich panel
