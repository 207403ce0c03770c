"""`config migrate`: versioned steps checked against a corpus of legacy configs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sr_control.config import load as loader
from sr_control.config.errors import ConfigError
from sr_control.config.explain import explain
from sr_control.config.migrate import MigrationRefused, guess_indent, migrate_text, steps

CORPUS = sorted(p for p in (Path(__file__).parent / "migrations").iterdir() if p.is_dir())


def test_the_corpus_has_at_least_ten_legacy_configs() -> None:
    assert len(CORPUS) >= 10


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_each_legacy_config_migrates_to_its_expected_file(case: Path) -> None:
    source = (case / "input.yaml").read_text()
    result = migrate_text(source, "input.yaml")
    assert (result.from_version, result.to_version) == (1, 2)
    assert result.text == (case / "expected.yaml").read_text()


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_migrating_twice_changes_nothing(case: Path) -> None:
    once = migrate_text((case / "input.yaml").read_text(), "input.yaml").text
    again = migrate_text(once, "input.yaml")
    assert not again.due and again.text == once


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_the_migrated_listener_serves_what_it_served_before(case: Path) -> None:
    """Reading the old file (migrated in memory) and the migrated file give the same service."""
    old = loader.validate_text((case / "input.yaml").read_text(), "input.yaml")
    new = loader.validate_text((case / "expected.yaml").read_text(), "expected.yaml")
    assert new.valid and not new.problems  # current format: no warning either
    assert explain(old.config) == explain(new.config)


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_every_comment_survives(case: Path) -> None:
    def comments(text: str) -> list[str]:
        return sorted(m.group(1).strip() for m in re.finditer(r"#(.*)$", text, re.M))

    source = (case / "input.yaml").read_text()
    assert comments(source) == comments(migrate_text(source, "input.yaml").text)


def test_format_1_systemone_listeners_keep_the_4_0_schema() -> None:
    migrated = loader.load_text(
        (Path(__file__).parent / "migrations/04-systemone-deadline-mixed/expected.yaml").read_text()
    )
    apis = migrated.listeners[0].apis
    assert apis is not None and apis["systemone"].schema_ == "vllm-sr/4.0"
    assert apis["systemone"].models == ["vllm-sr/auto", "d3"] and apis["systemone"].max_deadline_ms == 3000


def test_key_order_holds_around_the_moved_fields() -> None:
    text = migrate_text((Path(__file__).parent / "migrations/06-comments/input.yaml").read_text(), "f").text
    edge = text[text.index("- name: edge") : text.index("- name: ops")]
    keys = re.findall(r"^    (\w+):", edge, re.M)
    assert keys == ["address", "apis", "port"]


def test_a_file_in_the_current_format_comes_back_byte_for_byte() -> None:
    text = "version: 2   # current\nlisteners:\n  - {name: a,   port: 1}\n"
    result = migrate_text(text, "f")
    assert not result.due and result.text == text


def test_a_newer_format_is_refused() -> None:
    with pytest.raises(MigrationRefused) as err:
        migrate_text("version: 7\n", "new.yaml")
    assert str(err.value.problem) == (
        "new.yaml:1:10: error: version: config format 7 is newer than this vllm-sr understands (formats 1 to "
        "2); upgrade vllm-sr"
    )


def test_a_legacy_file_with_mistakes_is_refused_with_the_input_lines() -> None:
    text = "listeners:\n  - name: a\n    port: 1\n    models: [nowhere]\n"
    with pytest.raises(ConfigError) as err:
        migrate_text(text, "old.yaml")
    # Reported once, at the user's own line, though the model moves into four APIs' lists.
    assert [str(p) for p in err.value.problems] == [
        (
            "old.yaml:4:14: error: listeners[0].apis.chat_completions.models[0]: unknown model 'nowhere' (llm "
            "models: none defined)"
        ),
    ]


def test_steps_form_one_chain_to_the_current_format() -> None:
    assert [(s.from_version, s.to_version) for s in steps()] == [(1, 2)]
    assert all(s.summary for s in steps())


@pytest.mark.parametrize(
    "text,expected",
    [
        ("a:\n  b: 1\n  c:\n  - x\n", (2, 2, 0)),
        ("a:\n    b: 1\n    c:\n        -   x: 1\n            y: 2\n", (4, 8, 4)),
        ("a:\n  - b: 1\n    c:\n      d: 2\n", (2, 4, 2)),
    ],
)
def test_indentation_is_read_from_the_file(text: str, expected: tuple[int, int, int]) -> None:
    assert guess_indent(text) == expected
