"""A least-recently-used map bounded by the summed weight of its entries (bytes, characters).

The runtime keeps two such caches, states (weighed in bytes) and tokenizations (in characters);
this is the one mechanism under both.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class WeightedLru(Generic[K, V]):
    """Entries whose weights sum to at most `capacity`; the least recently used go first, and an
    entry heavier than the whole capacity is never kept (so 0 keeps nothing)."""

    def __init__(self, capacity: int, weight: Callable[[K, V], int]) -> None:
        self.capacity = capacity
        self.weight = weight
        self.total = 0
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> int:
        """Keep `value` under `key` (unless it is there already or too heavy); the entries evicted."""
        size = self.weight(key, value)
        if size > self.capacity or key in self._entries:
            return 0
        evicted = 0
        while self.total + size > self.capacity:
            old_key, old = self._entries.popitem(last=False)
            self.total -= self.weight(old_key, old)
            evicted += 1
        self._entries[key] = value
        self.total += size
        return evicted
