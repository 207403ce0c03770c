"""docs/decide/ shows what the product does: its example is the checked-in one, and the
explain output it prints is what `vllm-sr config explain` prints."""

from __future__ import annotations

import re

from sr_control.card import Card, Limits
from sr_control.config.load import load_text
from sr_control.decide.cards import card_problems
from tests.conftest import ROOT, run_cli

CONFIG_PAGE = (ROOT / "docs" / "decide" / "config.md").read_text()
EXAMPLE = ROOT / "examples" / "decide.yaml"


def blocks(page: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", page, flags=re.S)


def test_the_worked_example_is_the_checked_in_example_and_it_validates() -> None:
    assert blocks(CONFIG_PAGE, "yaml")[0] == EXAMPLE.read_text()
    result = run_cli("config", "validate", str(EXAMPLE))
    assert (result.returncode, result.stdout) == (0, f"{EXAMPLE}: valid\n")


def test_the_explain_output_shown_is_what_explain_prints() -> None:
    shown = CONFIG_PAGE.split("`vllm-sr config explain examples/decide.yaml` prints:\n\n```\n", 1)[1]
    shown = shown.split("```", 1)[0]
    printed = run_cli("config", "explain", str(EXAMPLE)).stdout
    assert printed.endswith(shown)


def test_the_sidecars_own_card_type_fits_the_card_check() -> None:
    """docs/decide/cards.md: the sidecar passes the cards its CardBook holds, as they are."""
    config = load_text(EXAMPLE.read_text())
    no_pii = Card(frozenset({"noul", "choice", "score", "span"}), frozenset({"text"}), limits=Limits(max_options=8))
    assert [line for _, line in card_problems(config, {"local-d3": no_pii})] == [
        "signal 'pii' cannot be asked of 'vllm-sr/auto': deployment 'local-d3' lacks the pii preset "
        "(a span preset is answered only by a model that lists it)"
    ]
    with_pii = Card(frozenset({"noul", "choice", "score", "span"}), frozenset({"text"}), frozenset({"pii"}))
    assert card_problems(config, {"local-d3": with_pii}) == []
