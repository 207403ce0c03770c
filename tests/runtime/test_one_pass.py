"""A cold state and its questions in one pass: what the state pass and the question pass give,
in one backbone pass where the state and its rows fit the token budget."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from sr_runtime.engine import Engine
from sr_runtime.types import ChoiceQuestion, DecisionRequest, NoulQuestion, ScoreQuestion

from .conftest import SEED_002_STATE
from .test_engine import max_dp

TOLERANCE = 1e-4
QUESTIONS = (
    NoulQuestion("Is this urgent?"),
    ChoiceQuestion((("billing", None), ("engineering", "Outages, errors and bugs"), ("other", None)), "Which team?"),
    ScoreQuestion(("calm", "annoyed", "angry"), "How angry is the customer?"),
    NoulQuestion("Is there an export button?"),
)


@contextmanager
def passes(engine: Engine) -> Iterator[list[int]]:
    """The token count of each backbone pass the engine makes inside the block."""
    seen: list[int] = []
    hook = engine.backbone.model.base_model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(
            (kwargs.get("input_ids") if kwargs.get("input_ids") is not None else kwargs["inputs_embeds"])
            .shape[:2]
            .numel()
        ),
        with_kwargs=True,
    )
    try:
        yield seen
    finally:
        hook.remove()


@pytest.mark.parametrize("preset", ["hybrid-prefix-bidir", "hybrid-causal", "llama-prefix-bidir", "llama-causal"])
def test_one_pass_keeps_the_state_and_reads_the_rows_as_the_two_passes_do(
    engines: dict[str, Engine], preset: str
) -> None:
    engine = engines[preset]
    backbone, mode = engine.backbone, engine.config.attention_mode
    tokens = engine.checkpoint.tokenizer
    state = tokens.encode(SEED_002_STATE * 3).ids
    # Rows of several widths, one a single token (a recurrence's one-step case in a question pass).
    questions = [tokens.encode(q).ids for q in ("Is it urgent?", "Which team should take it, and why?", "x")]
    assert min(len(q) for q in questions) == 1
    mlp = backbone.model.base_model.layers[-1].mlp
    seen: list[int] = []
    hook = mlp.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape[1]))
    try:
        snapshot, hidden = backbone.state_and_questions(state, questions, mode, engine.token_budget)
    finally:
        hook.remove()
    # The last layer's MLP runs for what is read after it alone: the state, and each row's last token.
    assert seen == [len(state) + len(questions)]
    alone = backbone.prefill(state, mode)
    rows = backbone.question_rows([alone] * len(questions), questions, mode, engine.token_budget)
    assert snapshot.length == alone.length == len(state)
    for ours, theirs in zip(snapshot.layers, alone.layers):
        assert type(ours) is type(theirs)
        for a, b in zip(ours.tensors, theirs.tensors):
            assert a.shape == b.shape and torch.allclose(a, b, atol=TOLERANCE)
            # Its own copies: a cached state does not keep the packed pass alive.
            assert a.untyped_storage().nbytes() == a.numel() * a.element_size()
    assert torch.allclose(snapshot.hidden, alone.hidden, atol=TOLERANCE)
    assert hidden.shape == rows.shape and torch.allclose(hidden, rows, atol=TOLERANCE)


@pytest.mark.parametrize("preset", ["hybrid-prefix-bidir", "llama-causal"])
def test_a_cold_state_takes_one_pass_a_cached_one_a_question_pass_and_a_big_one_two(
    fresh_engine: Callable[..., Engine], references: dict[str, Engine], preset: str
) -> None:
    engine = fresh_engine(preset, token_budget=256)
    request = DecisionRequest(SEED_002_STATE, QUESTIONS)
    state = len(engine.checkpoint.tokenizer.encode(SEED_002_STATE).ids)
    with passes(engine) as cold:
        first = engine.answer(request)
    assert len(cold) == 1 and cold[0] > state  # the state and every row
    assert (engine.state_cache.stats.misses, len(engine.state_cache)) == (1, 1)
    with passes(engine) as warm:
        again = engine.answer(request)
    assert len(warm) == 1 and engine.state_cache.stats.hits == 1  # the rows alone, from the cached state
    assert max_dp(first, again) <= TOLERANCE
    # A state that does not fit one pass with its rows takes the state pass, then the rows.
    big = DecisionRequest(SEED_002_STATE * 12, QUESTIONS)
    with passes(engine) as two:
        answer = engine.answer(big)
    assert len(two) >= 2
    reference = references[preset]
    for req, got in ((request, first), (big, answer)):
        assert max_dp(got, reference.answer(req)) <= TOLERANCE


def test_a_batch_of_several_states_keeps_its_passes(checkpoints: dict[str, Path]) -> None:
    engine = Engine.load(checkpoints["hybrid-prefix-bidir"], state_cache_bytes=0)
    requests = [DecisionRequest(SEED_002_STATE, QUESTIONS), DecisionRequest("Another state entirely.", QUESTIONS)]
    with passes(engine) as seen:
        engine.answer_batch(requests)
    assert len(seen) == 3  # each state's pass, then one pass of all their rows
