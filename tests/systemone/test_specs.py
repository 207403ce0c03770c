"""The three specs agree, and the checks that keep them agreeing can fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from systemone.generator import OUTPUTS, outputs
from systemone.specs import EXTENSIONS_FILE, LEGACY_FILE, SPEC_DIR, SPEC_FILES, STANDARD_FILE, parse_specs

ROOT = Path(__file__).resolve().parents[2]
TEXTS = {f: (ROOT / SPEC_DIR / f).read_text(encoding="utf-8") for f in SPEC_FILES.values()}


def conflicts(**edits: tuple[str, str]) -> list[str]:
    texts = dict(TEXTS)
    for key, (old, new) in edits.items():
        file = {"standard": STANDARD_FILE, "extensions": EXTENSIONS_FILE, "legacy": LEGACY_FILE}[key]
        assert old in texts[file], old
        texts[file] = texts[file].replace(old, new, 1)
    return parse_specs(texts).conflicts()


def test_the_checked_in_specs_agree() -> None:
    assert conflicts() == []


def test_a_field_the_legacy_contract_types_differently_has_two_meanings() -> None:
    found = conflicts(legacy=("threshold: {type: number, minimum: 0, maximum: 1}", "threshold: {type: string}"))
    assert found == [
        "question.threshold: two meanings: vllm-sr-5.0.extensions.yaml says number (minimum 0, maximum 1), "
        "vllm-sr-4.0.openapi.yaml says string"
    ]


def test_a_oneof_with_an_untyped_alternative_states_no_type_rather_than_failing() -> None:
    # Sorting the alternatives' types put None beside a string: TypeError, not a reading.
    typed = 'instructions: {oneOf: [{$ref: "#/components/schemas/Text"}, {type: "null"}]}'
    assert conflicts(legacy=(typed, typed.replace('{type: "null"}', "{description: untyped}"))) == []


def test_an_extension_may_not_redefine_a_standard_field() -> None:
    found = conflicts(extensions=("  - name: roles\n    level: request", "  - name: model\n    level: request"))
    assert any(
        f.startswith("request.model: defined by systemone-0.2.schema.yaml and again by vllm-sr-5.0.extensions.yaml")
        for f in found
    )


def test_since_must_agree_with_the_frozen_contract() -> None:
    found = conflicts(
        extensions=(
            '  - name: decision_adapter\n    level: question\n    type: string\n    since: "5.0"',
            '  - name: decision_adapter\n    level: question\n    type: string\n    since: "4.0"',
        )
    )
    assert found == [
        "question.decision_adapter: the extension set says since 4.0, but vllm-sr-4.0.openapi.yaml does not define it"
    ]


def test_a_4_0_only_member_must_be_a_listed_legacy_form() -> None:
    found = conflicts(legacy=("      members: [question.choices]\n", ""))
    assert found == [
        "question.choices: vllm-sr-4.0.openapi.yaml defines it, but it is neither standard, an extension nor "
        "a listed legacy form"
    ]


@pytest.mark.parametrize("rel", OUTPUTS)
def test_generated_files_are_current(rel: str) -> None:
    assert (ROOT / rel).read_text(encoding="utf-8") == outputs(parse_specs(TEXTS))[rel], (
        f"run `vllm-sr schemas generate` ({rel})"
    )


def test_the_standard_records_its_source_and_the_hash_of_what_it_was_checked_against() -> None:
    from systemone.generated.fields import SPECS, STANDARD_SOURCE

    assert STANDARD_SOURCE["url"] == "https://api.typesafe.ai/openapi.json"
    assert len(STANDARD_SOURCE["sha256"]) == 64 and "typesafe-sdk 0.7.5" in STANDARD_SOURCE["checked_against"]
    assert SPECS["systemone/0.2"][1] == parse_specs(TEXTS).sha256(STANDARD_FILE)
