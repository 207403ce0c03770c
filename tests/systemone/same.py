"""Equality that == cannot tell: the same types all the way down, mappings in the same order.

A dict equals a JsonObject with the same members, and an int a float; the fast readers must
build exactly what the general reader builds, so their tests compare with ``same``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a) if f.compare)
    if isinstance(a, Mapping):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)
