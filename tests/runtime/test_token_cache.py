"""The tokenization cache: the tokenizer's own tokens for every text, bounded in characters."""

from __future__ import annotations

from pathlib import Path

from sr_runtime.checkpoint import read_checkpoint
from sr_runtime.engine import Engine
from sr_runtime.presets import CORPUS
from sr_runtime.token_cache import CachedTokenizer
from sr_runtime.types import ChoiceQuestion, DecisionRequest, NoulQuestion

TEXTS = [line for line in CORPUS.splitlines() if line]


def tokenizer(checkpoints: dict[str, Path]):  # type: ignore[no-untyped-def]
    return read_checkpoint(checkpoints["llama-prefix-bidir"]).tokenizer


def test_cached_tokens_are_the_tokenizers_own_whether_found_or_new(checkpoints: dict[str, Path]) -> None:
    plain = tokenizer(checkpoints)
    cached = CachedTokenizer(plain)
    for _round in range(2):  # first every text is new, then every one is found
        for text, tokens in zip(TEXTS, cached.encode_batch(TEXTS)):
            expected = plain.encode(text, add_special_tokens=False)
            assert list(tokens.ids) == expected.ids and list(tokens.offsets) == expected.offsets
    assert len(cached) == len(TEXTS)


def test_a_changed_text_is_tokenized_anew(checkpoints: dict[str, Path]) -> None:
    plain = tokenizer(checkpoints)
    cached = CachedTokenizer(plain)
    before = cached.encode("Is this spam?")
    after = cached.encode("Is this spam!")
    assert list(after.ids) == plain.encode("Is this spam!", add_special_tokens=False).ids
    assert after.ids != before.ids and len(cached) == 2


def test_the_cache_is_bounded_and_keeps_what_was_used_last(checkpoints: dict[str, Path]) -> None:
    cached = CachedTokenizer(tokenizer(checkpoints), capacity_chars=200)
    cached.encode(TEXTS[0])
    for text in TEXTS[1:]:
        cached.encode(text)
        cached.encode(TEXTS[0])  # used again: the last to go
        assert cached.chars <= 200
    assert cached._lru.get(TEXTS[0]) is not None and cached._lru.get(TEXTS[1]) is None
    cached.encode("x" * 500)  # over the whole capacity: answered, never kept
    assert cached.chars <= 200 and cached._lru.get("x" * 500) is None


def test_answers_are_the_same_from_a_cold_and_a_warm_cache(checkpoints: dict[str, Path]) -> None:
    engine = Engine.load(checkpoints["hybrid-prefix-bidir"], state_cache_bytes=0)
    request = DecisionRequest(
        TEXTS[2], (NoulQuestion("Is this spam?"), ChoiceQuestion((("yes", None), ("no", None)), "Refund?"))
    )
    cold = engine.answer(request)
    assert len(engine.tokens) > 0
    assert engine.answer(request) == cold
