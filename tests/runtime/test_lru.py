"""The runtime's weighted LRU (states in bytes, tokenizations in characters): what it keeps,
what it evicts and how it counts them, now that cachetools' LRUCache holds the entries."""

from __future__ import annotations

from sr_runtime.lru import WeightedLru


def by_value_length() -> WeightedLru[str, str]:
    return WeightedLru(10, lambda _, value: len(value))


def test_the_least_recently_used_go_first_and_put_counts_them() -> None:
    lru = by_value_length()
    assert lru.put("a", "xxxx") == 0 and lru.put("b", "xxxx") == 0
    assert lru.get("a") == "xxxx"  # "a" is now the more recent
    assert lru.put("c", "xxxxxx") == 1  # 4 + 4 + 6 > 10: "b" goes, alone
    assert (lru.get("a"), lru.get("b"), lru.get("c")) == ("xxxx", None, "xxxxxx")
    assert (len(lru), lru.total) == (2, 10)
    assert lru.put("d", "xxxxxxxxxx") == 2  # the whole capacity: both others go


def test_an_entry_heavier_than_the_capacity_is_never_kept_and_evicts_nothing() -> None:
    lru = by_value_length()
    lru.put("a", "xxxx")
    assert lru.put("big", "x" * 11) == 0
    assert (lru.get("big"), lru.get("a"), lru.total) == (None, "xxxx", 4)
    nothing: WeightedLru[str, str] = WeightedLru(0, lambda _, value: len(value))
    assert nothing.put("a", "x") == 0 and len(nothing) == 0


def test_a_key_already_there_keeps_its_first_value() -> None:
    lru = by_value_length()
    lru.put("a", "xx")
    assert lru.put("a", "yyyyyy") == 0
    assert (lru.get("a"), lru.total) == ("xx", 2)


def test_the_weight_may_read_the_key() -> None:
    """The token cache weighs a text, the key, not its tokens."""
    lru: WeightedLru[str, int] = WeightedLru(6, lambda text, _: len(text))
    lru.put("abc", 1)
    lru.put("def", 2)
    assert lru.put("gh", 3) == 1 and lru.total == 5 and lru.get("abc") is None
