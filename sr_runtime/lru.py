"""A least-recently-used map bounded by the summed weight of its entries (bytes, characters).

The runtime keeps two such caches, states (weighed in bytes) and tokenizations (in characters).
Both are cachetools' ``LRUCache`` sized by ``getsizeof``, the mechanism under every cache of
the project (the config's validated entries, the compiler's packed Any values, the embedding
model's texts); this adapter keeps the interface the two were written against: a weight that
may read the key, and ``put`` saying how many entries it evicted (the state cache counts them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from cachetools import LRUCache

K = TypeVar("K")
V = TypeVar("V")


class WeightedLru(Generic[K, V]):
    """Entries whose weights sum to at most `capacity`; the least recently used go first, and an
    entry heavier than the whole capacity is never kept (so 0 keeps nothing)."""

    def __init__(self, capacity: int, weight: Callable[[K, V], int]) -> None:
        self.capacity = capacity
        self.weight = weight
        # Each value is kept beside its key, since getsizeof is given the value alone.
        self._entries: LRUCache[K, tuple[K, V]] = LRUCache(capacity, getsizeof=lambda entry: weight(*entry))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        """Whether `key` is kept; it is not made recent."""
        return key in self._entries

    @property
    def total(self) -> int:
        return int(self._entries.currsize)

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def put(self, key: K, value: V) -> int:
        """Keep `value` under `key` (unless it is there already or too heavy); the entries evicted."""
        if key in self._entries:
            return 0
        before = len(self._entries)
        try:
            self._entries[key] = (key, value)
        except ValueError:  # heavier than the capacity: cachetools keeps nothing, evicts nothing
            return 0
        return before + 1 - len(self._entries)
