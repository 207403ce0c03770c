"""Hypothesis strategies for System One bodies, shared by the fuzz tests of the sidecar and the
runtime: any JSON, and valid requests with one member replaced, added or removed (close to
right, so that reading goes deep before it finds the problem)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def near(valid: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``valid`` with one top-level member set to any JSON value, and maybe one dropped."""
    return st.builds(
        lambda key, value, drop: {**{k: v for k, v in valid.items() if k != drop}, key: value},
        st.sampled_from(["state", "questions", "model", "roles", "assets", "options", "requests", "x"]),
        json_values,
        st.sampled_from(["", "state", "questions"]),
    )
