"""docs/operate.md stays true: every verb and option it names exists, and each verb's help has an example."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from sr_control.cli import app
from tests.conftest import ROOT

PAGE = (ROOT / "docs" / "operate.md").read_text()
VERBS = [
    ["status"],
    ["request"],
    ["config", "plan"],
    ["config", "apply"],
    ["config", "versions"],
    ["config", "rollback"],
    ["config", "get"],
    ["logs"],
]


def _help(verb: list[str]) -> str:
    done = CliRunner().invoke(app, [*verb, "--help"])
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
def test_each_verbs_help_has_an_example_and_the_page_names_it(verb: list[str]) -> None:
    text = _help(verb)
    assert "Example:" in text and f"vllm-sr {' '.join(verb)}" in text.split("Example:", 1)[1]
    assert f"vllm-sr {' '.join(verb)}" in PAGE


def test_every_option_the_page_names_exists() -> None:
    offered = {o for verb in VERBS for o in re.findall(r"--[a-z-]+", _help(verb))}
    offered |= set(re.findall(r"--[a-z-]+", _help(["xds", "serve"])))
    # The kubectl command `config rollback` prints is quoted with kubectl's own options.
    ours = "\n".join(line for line in PAGE.splitlines() if "kubectl -n" not in line)
    named = set(re.findall(r"(--[a-z][a-z-]*)", ours))
    assert named and named <= offered, named - offered
