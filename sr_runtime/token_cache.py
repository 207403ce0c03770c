"""Tokenizations of texts seen before, in an LRU bounded in characters.

Requests repeat their question blocks (the same instructions and criteria, request after
request) and, where states are reused, their states. A tokenizer is a pure function of the
text, so a text's tokens are looked up by the text itself: a changed character is another key,
and an answer never depends on what the cache holds. Only ids and offsets are kept (what
prompt.py reads), not the tokenizer's whole Encoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from sr_runtime.lru import WeightedLru

DEFAULT_CAPACITY_CHARS = 4 * 2**20  # about 1M tokens of ids and offsets, some 100 MiB at most


@dataclass(frozen=True, slots=True)
class Tokens:
    ids: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]


class CachedTokenizer:
    """`encode` and `encode_batch` as the tokenizer's (no special tokens), remembered by text."""

    def __init__(self, tokenizer: Tokenizer, capacity_chars: int = DEFAULT_CAPACITY_CHARS) -> None:
        self.tokenizer = tokenizer
        self.capacity_chars = capacity_chars
        self._lru: WeightedLru[str, Tokens] = WeightedLru(capacity_chars, lambda text, _: len(text))

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def chars(self) -> int:
        return self._lru.total

    def encode(self, text: str, add_special_tokens: bool = False) -> Tokens:
        return self.encode_batch([text], add_special_tokens)[0]

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[Tokens]:
        assert not add_special_tokens, "a decision prompt is its text's tokens (checkpoint.check_tokenizer)"
        found = [self._lru.get(text) for text in texts]
        missing = sorted({text for text, tokens in zip(texts, found) if tokens is None})
        if missing:  # one batch call for what is new
            encoded = self.tokenizer.encode_batch(missing, add_special_tokens=False)
            new = {text: Tokens(tuple(e.ids), tuple(e.offsets)) for text, e in zip(missing, encoded)}
            for text, tokens in new.items():
                self._lru.put(text, tokens)
            found = [tokens if tokens is not None else new[text] for text, tokens in zip(texts, found)]
        return found  # type: ignore[return-value]  # every None was filled from `new`
