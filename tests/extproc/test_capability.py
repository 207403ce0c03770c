"""What a request needs and what a member lacks: the words a client reads in a 400."""

from __future__ import annotations

import json

import pytest

from sr_control.card import STANDARD_CARD, Card, Limits
from sr_control.extproc.capability import lacks, needs_of
from systemone import REGISTRY

TINY = Card(
    frozenset({"noul", "choice", "score"}),
    frozenset({"text"}),
    limits=Limits(max_options=26, min_levels=2, max_levels=10, max_input_tokens=2048),
    contract="5.0.0",
)


def read(doc: dict, schema: str = "vllm-sr/5.0", path: str = "/v1/systemone"):  # type: ignore[no-untyped-def, type-arg]
    return REGISTRY.listener(schema).read(path, json.dumps(doc).encode()).ir


def choice(n: int) -> dict:  # type: ignore[type-arg]
    return {"type": "choice", "criteria": {f"o{i}": None for i in range(n)}}


def test_a_request_within_the_card_lacks_nothing() -> None:
    needs = needs_of(
        read(
            {
                "state": "x",
                "questions": {
                    "a": choice(26),
                    "b": {"type": "noul", "instructions": "?"},
                    "c": {"type": "score", "criteria": ["l", "m", "h"]},
                },
            }
        )
    )
    assert needs.question_types == {"choice", "noul", "score"} and needs.max_options == 26 and needs.levels == (3, 3)
    assert lacks(needs, TINY) == ()


@pytest.mark.parametrize(
    ("questions", "expected"),
    [
        ({"a": choice(40)}, "choice questions of 40 options (it reads at most 26)"),
        ({"s": {"type": "span", "criteria": {"person": None}}}, "span questions"),
        (
            {"s": {"type": "set", "criteria": {"a": None}}, "t": {"type": "span", "criteria": {"p": None}}},
            "set and span questions",
        ),
        (
            {
                "l": {"type": "score", "criteria": [str(i) for i in range(10)]},
                "m": {"type": "score", "criteria": ["a", "b"]},
            },
            None,
        ),
    ],
)
def test_what_a_member_lacks_is_said_in_words(questions: dict, expected: str | None) -> None:  # type: ignore[type-arg]
    missing = lacks(needs_of(read({"state": "x", "questions": questions})), TINY)
    assert missing == (() if expected is None else (expected,))


def test_levels_outside_the_cards_range_are_lacking() -> None:
    narrow = Card(frozenset({"score"}), frozenset({"text"}), limits=Limits(min_levels=3, max_levels=5))
    needs = needs_of(
        read(
            {
                "state": "x",
                "questions": {
                    "a": {"type": "score", "criteria": ["a", "b"]},
                    "b": {"type": "score", "criteria": list("abcdef")},
                },
            }
        )
    )
    assert lacks(needs, narrow) == ("score questions of 2 to 6 levels (it reads 3-5)",)


def test_media_and_fields_a_standard_target_cannot_carry() -> None:
    doc = {
        "state": ["<img>", "what is it?"],
        "assets": {"<img>": {"type": "image", "format": "png", "data_base64": "iVBORw0KGgo="}},
        "questions": {"a": {"type": "noul", "instructions": "?", "over": ["x"]}},
    }
    needs = needs_of(read(doc))
    assert needs.modalities == {"text", "image"} and needs.fields == {"over"}
    assert lacks(needs, STANDARD_CARD) == ("image input", "the question field over")
    assert lacks(needs, Card(frozenset({"noul"}), frozenset({"text", "image"}))) == ()  # a card takes every field


def test_another_runtime_contract_is_refused_whatever_it_answers() -> None:
    old = Card(TINY.question_types, TINY.modalities, contract="4.0.0")
    assert lacks(needs_of(read({"state": "x", "questions": {"a": choice(2)}})), old) == (
        "runtime contract 4.0.0 (this router speaks 5.0.0)",
    )


def test_input_size_is_a_floor_estimate_so_only_a_sure_overflow_is_refused() -> None:
    small = Card(frozenset({"noul"}), frozenset({"text"}), limits=Limits(max_input_tokens=100))
    fits = needs_of(
        read({"state": "word " * 150, "questions": {"a": {"type": "noul", "instructions": "?"}}})
    )  # ~150-190 tokens
    assert lacks(fits, small) == ()  # the member may still refuse it: it counts exactly
    huge = needs_of(read({"state": "word " * 400, "questions": {"a": {"type": "noul", "instructions": "?"}}}))
    assert lacks(huge, small) == ("an input of at least 250 tokens (it reads at most 100)",)


def test_a_batch_needs_what_any_of_its_requests_needs_and_4_0_forms_count() -> None:
    batch = read(
        {
            "requests": {
                "a": {"state": "x", "questions": {"q": choice(3)}},
                "b": {"state": "y", "questions": {"q": {"type": "span", "criteria": {"p": None}}}},
            }
        },
        path="/v1/systemone/batch",
    )
    assert needs_of(batch).question_types == {"choice", "span"}
    legacy = read(
        {"states": ["a", "b"], "questions": {"q": {"type": "choice", "choices": [str(i) for i in range(30)]}}},
        schema="vllm-sr/4.0",
    )
    assert needs_of(legacy).max_options == 30
