"""The per-request yes/no checks agree with ``problems``, which explains every no.

``valid`` and ``validator`` answer in C where they can (``set(map(type, items))``); every type
and bounds pair the spec tables use, and a few more, is held to ``problems`` on generated values.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from systemone import fieldtypes
from systemone.generated import fields as F
from systemone.jsontext import JsonObject, Number, freeze
from systemone.rules import READINGS


def _table_types() -> list[tuple[str, dict[str, Any]]]:
    pairs = {(spec["type"], tuple(spec["bounds"].items())) for spec in F.EXTENSION_FIELDS.values()}
    for reading in READINGS.values():
        pairs |= {
            (t, tuple(b.items())) for t, b in [*reading.options.values(), *(c for c in reading.criteria.values() if c)]
        }
    pairs |= {(t, tuple(b.items())) for t, b, _ in F.LEGACY_QUESTION.values()}
    pairs |= {
        ("map<string>", ()),
        ("array<boolean?>", (("min_items", 1),)),
        ("map<text>", ()),
        ("array<any>", ()),
        ("number", (("maximum", 1),)),
    }
    return [(t, dict(b)) for t, b in sorted(pairs, key=repr)]


TYPES = _table_types()
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([Number("1e3"), Number("0.5"), Number("-0"), 1.5])
    | st.text(max_size=3)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=2), inner, max_size=4),
    max_leaves=12,
)
content = values | values.map(freeze) | values.map(lambda v: JsonObject(v) if isinstance(v, dict) else v)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(TYPES), content)
def test_fuzz_yes_no_checks_agree_with_problems(spec: tuple[str, dict[str, Any]], value: Any) -> None:
    expr, bounds = spec
    expected = not fieldtypes.problems(expr, value, bounds)
    assert fieldtypes.valid(expr, value, bounds) is expected
    assert fieldtypes.validator(expr, bounds)(value) is expected
    assert fieldtypes.checker(expr)(value) is (not fieldtypes.problems(expr, value))


def test_the_table_types_are_all_checked() -> None:
    assert {"map<text?>", "array<text>", "integer", "boolean", "object:noul_criteria?"} <= {t for t, _ in TYPES}
