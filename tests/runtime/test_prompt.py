"""Prompt layouts and the state block size rule, on the presets' real BPE tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from sr_runtime.errors import InvalidInput
from sr_runtime.presets import CODES, CORPUS
from sr_runtime.prompt import LAYOUTS, QUESTION_LEAD, checked_state_tokens, encode_prompts, state_block_size
from sr_runtime.types import ChoiceQuestion, NoulQuestion, ScoreQuestion

QUESTIONS = (
    NoulQuestion("Does the user report a problem that blocks their work?"),
    ChoiceQuestion((("billing", "Payments, invoices and refunds"), ("engineering", None)), "Which team?"),
    ScoreQuestion(("calm", "annoyed", {"level": "furious"})),
    NoulQuestion(None, true="The user is angry"),
)


@pytest.fixture(scope="module")
def tokenizer(checkpoints: dict[str, Path]) -> Tokenizer:
    return Tokenizer.from_file(str(checkpoints["hybrid-prefix-bidir"] / "tokenizer.json"))


def _whole(tokenizer: Tokenizer, state_block: str, question_block: str) -> tuple[list[int], list[int]]:
    encoding = tokenizer.encode(state_block + question_block, add_special_tokens=False)
    s = state_block_size(encoding.offsets, len(state_block))
    return encoding.ids[:s], encoding.ids[s:]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_token_joining_the_state_to_the_question_belongs_to_the_question(tokenizer: Tokenizer, layout: str) -> None:
    crossings = 0
    for state in [*CORPUS.splitlines(), "Is the refund window 30 days?", "Thanks, the issue is solved now."]:
        state_block = LAYOUTS[layout].state_block(state)
        prompt = state_block + LAYOUTS[layout].question_block(QUESTIONS[0], CODES)
        encoding = tokenizer.encode(prompt, add_special_tokens=False)
        s = state_block_size(encoding.offsets, len(state_block))
        assert encoding.offsets[s - 1][1] <= len(state_block) < encoding.offsets[s][1]
        # The first question token holds the state's last character: the merge crossed the boundary.
        crossings += encoding.offsets[s][0] < len(state_block)
    assert crossings >= 1, "the preset tokenizer should merge across the boundary for some states"


def test_every_question_block_starts_with_the_lead_and_never_holds_the_id() -> None:
    for layout in LAYOUTS.values():
        for question in QUESTIONS:
            block = layout.question_block(question, CODES)
            assert block.startswith(QUESTION_LEAD)
    block = LAYOUTS["d3"].question_block(QUESTIONS[1], CODES)
    assert block == "\n\nQuestion: Which team?\nA. billing: Payments, invoices and refunds\nB. engineering\nAnswer:"


def test_header_v1_names_the_question_type_and_option_count() -> None:
    layout = LAYOUTS["header-v1"]
    assert (
        layout.state_block({"a": "ü"})
        == "### System\n" + layout.state_block("x").split("\n")[1] + '\n\n### State\n{"a": "ü"}'
    )
    assert layout.question_block(QUESTIONS[2], CODES) == (
        "\n\n### Question (score, 3 options)\nWhich level fits best?\n\n"
        '### Options\nA. calm\nB. annoyed\nC. {"level": "furious"}\n\n### Answer\n'
    )


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_state_is_tokenized_once_and_matches_whole_prompt_tokenization(tokenizer: Tokenizer, layout: str) -> None:
    states = [*CORPUS.splitlines(), "", "x", "AB", "emoji 🙂", "ends with a newline\n", "a space ", {"k": [1, "ü"]}]
    for state in states:
        state_block = LAYOUTS[layout].state_block(state)
        blocks = [LAYOUTS[layout].question_block(q, CODES) for q in QUESTIONS]
        prompts = encode_prompts(tokenizer, state_block, blocks)
        assert len({p.state for p in prompts}) == 1
        for prompt, block in zip(prompts, blocks):
            assert (list(prompt.state), list(prompt.question)) == _whole(tokenizer, state_block, block)


def test_a_caller_given_state_size_must_be_an_int_not_a_bool() -> None:
    assert checked_state_tokens(3, 10) == 3
    with pytest.raises(InvalidInput, match="the state size must be an int, not bool"):
        checked_state_tokens(True, 10)
    with pytest.raises(InvalidInput, match="the state size must be an int, not float"):
        checked_state_tokens(3.0, 10)
    with pytest.raises(InvalidInput, match=r"the state size 11 is outside 1..10"):
        checked_state_tokens(11, 10)


def test_a_caller_given_state_size_moves_the_boundary(tokenizer: Tokenizer) -> None:
    layout = LAYOUTS["d3"]
    state_block = layout.state_block("The refund window is 30 days from the date of purchase.")
    blocks = [layout.question_block(q, CODES) for q in QUESTIONS[:2]]
    rule = encode_prompts(tokenizer, state_block, blocks)
    given = encode_prompts(tokenizer, state_block, blocks, state_tokens=len(rule[0].state) - 4)
    assert len(given[0].state) == len(rule[0].state) - 4
    for a, b in zip(rule, given):
        assert a.state + a.question == b.state + b.question
