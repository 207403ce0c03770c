"""An LRU of computed states across requests, bounded in bytes.

A state is keyed by a digest of its whole state block and its size: under prefix_bidir every
state token's K/V depends on the whole state (it reads later state tokens too), so a prefix
digest would not do. Question blocks are never cached: they read themselves both ways.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from sr_runtime.backbone import StateSnapshot
from sr_runtime.lru import WeightedLru


def state_key(state_ids: Sequence[int], media: Sequence[tuple[int, str]] = ()) -> str:
    """sha256 of the state block's token ids, with its size and each asset's place and digest.

    A media position's id is a stand-in, so the asset's own digest is what tells two states apart.
    """
    digest = hashlib.sha256()
    digest.update(len(state_ids).to_bytes(8, "little"))
    digest.update(array("I", state_ids).tobytes())  # 4 bytes a token id, in one call
    for start, asset in media:
        digest.update(start.to_bytes(8, "little") + asset.encode("ascii"))
    return f"{digest.hexdigest()}:{len(state_ids)}"


@dataclass(slots=True)
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0


class StateCache:
    """Least recently used states, at most `capacity_bytes` in all; 0 keeps nothing."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.stats = CacheStats()
        self._lru: WeightedLru[str, StateSnapshot] = WeightedLru(capacity_bytes, lambda _, state: state.nbytes)

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, key: str) -> bool:
        """Whether a state is kept, counted as neither a hit nor a miss (`get` counts)."""
        return key in self._lru

    @property
    def nbytes(self) -> int:
        return self._lru.total

    def get(self, key: str) -> StateSnapshot | None:
        state = self._lru.get(key)
        if state is None:
            self.stats.misses += 1
        else:
            self.stats.hits += 1
        return state

    def put(self, key: str, state: StateSnapshot) -> None:
        self.stats.evictions += self._lru.put(key, state)
