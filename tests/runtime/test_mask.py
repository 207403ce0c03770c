"""The attention masks: prefix_bidir as drawn in its docstring, and the cached-row masks agree with it."""

from __future__ import annotations

import pytest
import torch

from sr_runtime.mask import (
    ATTENTION_MODES,
    padded_prompt_mask,
    prefix_bidir_mask,
    prompt_mask,
    question_rows_mask,
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
    rows = question_rows_mask(mode, [s], [q], s, q)  # type: ignore[arg-type]
    assert torch.equal(rows[0, 0], dense[s:, :])


@pytest.mark.parametrize("mode", ["causal", "prefix_bidir"])
def test_padded_question_rows_never_read_padding(mode: str) -> None:
    mask = question_rows_mask(mode, [2, 4], [3, 1], state_width=4, question_width=3)  # type: ignore[arg-type]
    # Row 0: state of 2 padded to 4, question of 3. Row 1: state of 4, question of 1 padded to 3.
    assert not mask[0, 0, :, 2:4].any()
    assert not mask[1, 0, :, 5:].any()
    for real in (mask[0, 0, :3], mask[1, 0, :1]):
        assert real.any(dim=-1).all()
    assert mask[1, 0, 1:, :4].all()  # padding queries read the state, so no softmax row is empty


@pytest.mark.parametrize("mode", ATTENTION_MODES)
def test_padded_prompt_rows_match_each_prompts_own_mask(mode: str) -> None:
    mask = padded_prompt_mask(mode, [2, 3], [4, 6], width=6)
    assert torch.equal(mask[0, 0, :4, :4], prompt_mask(mode, 2, 2))
    assert not mask[0, 0, :4, 4:].any()
    assert torch.equal(mask[1, 0], prompt_mask(mode, 3, 3))
