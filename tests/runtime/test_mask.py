"""The attention masks: prefix_bidir as drawn in its docstring, and the question-row masks agree with it."""

from __future__ import annotations

import pytest
import torch

from sr_runtime.mask import (
    ATTENTION_MODES,
    padded_prompt_mask,
    prefix_bidir_mask,
    prompt_mask,
    question_mask,
    state_mask,
)


def _rows(*lines: str) -> torch.Tensor:
    return torch.tensor([[c == "1" for c in line] for line in lines])


def test_prefix_bidir_state_reads_itself_both_ways_and_never_a_question() -> None:
    assert torch.equal(
        prefix_bidir_mask(3, 2),
        _rows("11100", "11100", "11100", "11111", "11111"),
    )


def test_causal_and_noncausal_prompt_masks() -> None:
    assert torch.equal(prompt_mask("causal", 2, 2), _rows("1000", "1100", "1110", "1111"))
    assert torch.equal(prompt_mask("noncausal_full_attention", 2, 2), torch.ones(4, 4, dtype=torch.bool))


@pytest.mark.parametrize("mode", ["causal", "prefix_bidir"])
def test_state_and_question_masks_are_the_blocks_of_the_prompt_mask(mode: str) -> None:
    s, q = 5, 3
    dense = prompt_mask(mode, s, q)  # type: ignore[arg-type]
    assert torch.equal(state_mask(mode, s), dense[:s, :s])  # type: ignore[arg-type]
    assert dense[s:, :s].all()  # a question reads its whole state (kept apart in a question pass)
    assert torch.equal(question_mask(mode, [q], q)[0, 0], dense[s:, s:])  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["causal", "prefix_bidir"])
def test_padded_question_rows_never_read_padding(mode: str) -> None:
    mask = question_mask(mode, [3, 1], question_width=3)  # type: ignore[arg-type]
    # Row 1: a question of 1 padded to 3: its padding keys are never read, its padding queries
    # read no question token (they read the state).
    assert not mask[1, 0, :, 1:].any()
    assert not mask[1, 0, 1:].any()
    assert mask[0, 0].any(dim=-1).all() and mask[1, 0, :1].any(dim=-1).all()


@pytest.mark.parametrize("mode", ATTENTION_MODES)
def test_padded_prompt_rows_match_each_prompts_own_mask(mode: str) -> None:
    mask = padded_prompt_mask(mode, [2, 3], [4, 6], width=6)
    assert torch.equal(mask[0, 0, :4, :4], prompt_mask(mode, 2, 2))
    assert not mask[0, 0, :4, 4:].any()
    assert torch.equal(mask[1, 0], prompt_mask(mode, 3, 3))
