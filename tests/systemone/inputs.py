"""Shared inputs for the protocol tests: the generated corpus, and hypothesis strategies."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

CORPUS = Path(__file__).parent / "corpus" / "internal_roundtrip.txt"


def corpus() -> list[tuple[str, bytes]]:
    """(name, request text) pairs from the generated internal round-trip corpus."""
    out = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        name, text = line.split("\t", 1)
        out.append((name, text.encode("utf-8")))
    return out


# Text as clients send it: any Unicode scalar (no lone surrogates), keys included.
text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x01"), max_size=12)
# Number literals JSON allows, in the spellings Python's json.dumps never writes.
literals = st.sampled_from(
    ["1.0", "1e3", "-0", "-0.0", "1E+2", "2.50", "0.000", "12345678901234567890", "3.0e-7", "-1E-2"]
)


def json_values(max_leaves: int = 25) -> st.SearchStrategy:
    """Python JSON values as json.loads returns them (dicts keep the order they were built in)."""
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
        max_leaves=max_leaves,
    )


@st.composite
def json_texts_with_literals(draw: st.DrawFn) -> str:
    """JSON text in json.dumps's layout, with number literals json.dumps would not write."""
    value = draw(json_values())
    text_ = json.dumps(value, ensure_ascii=False)
    # Swap numbers for literals at the top level of a wrapping array, keeping the layout.
    extra = draw(st.lists(literals, min_size=1, max_size=4))
    return "[" + ", ".join([text_, *extra]) + "]"
