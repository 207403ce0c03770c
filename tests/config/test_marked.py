"""The fast reader (``marked.read``, every current-format file) reads every value as ruamel.yaml
does (older formats and ``config migrate``): the same plain data, or both refuse the text.

Generated scalars (ints with signs, underscores and bases; floats with exponents, ``.inf`` and
``.nan``; dates and timestamps, valid or not; bools and nulls in every case; strings that look
like all of these, plain or quoted) and small documents of them are read by both readers.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import textwrap
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sr_control.config import source
from sr_control.config.load import validate_text
from sr_control.config.marked import YamlSyntaxError, from_round_trip, read

FILE = "c.yaml"


def _plain(value: Any) -> Any:
    """``value`` with every scalar's type spelled out (``1``, ``1.0`` and ``True`` are equal in
    Python; a reader that gave one for another must fail), nan equal to itself, order kept."""
    if isinstance(value, dict):
        return ("map", [(_plain(k), _plain(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("seq", [_plain(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, repr(value))


def _by_marked(text: str) -> tuple[str, Any]:
    try:
        return "data", _plain(read(text, FILE).data)
    except YamlSyntaxError as exc:
        return "refused", str(exc.problem)


def _by_ruamel(text: str) -> tuple[str, Any]:
    """ruamel.yaml's round-trip load, as plain values: how an older format is read."""
    try:
        return "data", _plain(from_round_trip(source.parse(text, FILE)).data)
    except YamlSyntaxError as exc:
        return "refused", str(exc.problem)


def _assert_read_alike(text: str, *, same_refusal: bool = True) -> None:
    """The same data from both readers, or both refuse. A value neither can build (or a tag no
    config uses) is refused in the same words at the same place; with ``same_refusal`` off
    (nested collections, where ruamel.yaml builds a level's scalars before the collections
    inside it and so may meet another bad value first), both in those words."""
    marked, ruamel = _by_marked(text), _by_ruamel(text)
    if marked[0] == ruamel[0] == "refused":
        ours = [("reads as a YAML" in p, "has no meaning in a config" in p) for p in (marked[1], ruamel[1])]
        if not any(ours[0]):
            # A syntax error or a key given twice: libyaml and ruamel word these differently.
            return
        if not same_refusal:
            return
    assert marked == ruamel, text


# -- scalars ---------------------------------------------------------------------------------

SIGNS = st.sampled_from(["", "", "+", "-"])


def _cased(word: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda upper: "".join(c.upper() if u else c for c, u in zip(word, upper))
    )


def _digits(alphabet: str, max_size: int = 6) -> st.SearchStrategy[str]:
    """Digits with underscores anywhere: leading, trailing, doubled, alone, or none at all."""
    return st.text(alphabet + "_", max_size=max_size) | st.text(alphabet, min_size=1, max_size=max_size)


BASES = st.sampled_from(
    [
        ("", "0123456789"),
        ("0", "01234567"),
        ("0b", "01"),
        ("0o", "01234567"),
        ("0x", "0123456789abcdefABCDEF"),
        ("0X", "0123456789"),
        ("0b", "0123"),
    ]
)
ints = st.builds(
    lambda sign, base, digits: sign + base[0] + digits, SIGNS, BASES, BASES.flatmap(lambda b: _digits(b[1]))
)

exponents = st.just("") | st.builds(
    lambda e, sign, d: e + sign + d, st.sampled_from("eE"), SIGNS, st.text("0123456789", max_size=3)
)
mantissas = st.one_of(
    st.builds(lambda i, f: f"{i}.{f}", _digits("0123456789", 4), _digits("0123456789", 4)),
    st.builds(lambda f: f".{f}", _digits("0123456789", 4)),
    _digits("0123456789", 4),
)
floats = st.one_of(
    st.builds(lambda sign, m, e: sign + m + e, SIGNS, mantissas, exponents),
    st.builds(lambda sign, word: sign + word, SIGNS, st.sampled_from([".inf", ".nan", "inf", "nan"]).flatmap(_cased)),
)

# Mostly real months and days, so that most dates build; now and then one that cannot.
_two = (st.integers(1, 12) | st.integers(1, 12) | st.integers(0, 99)).flatmap(
    lambda n: st.sampled_from([str(n), f"{n:02d}"])
)
dates = st.builds(
    lambda y, m, d: f"{y}-{m}-{d}", st.sampled_from(["2001", "1999", "0000", "9999", "201", "20011"]), _two, _two
)
zones = st.sampled_from(["", "Z", " Z", "+1", "-5", "-05:00", " +09:30", "+24"])
timestamps = st.builds(
    lambda date, sep, h, m, s, frac, zone: f"{date}{sep}{h}:{m}:{s}{frac}{zone}",
    dates,
    st.sampled_from(["T", "t", " ", "  "]),
    st.integers(0, 23).map(str) | st.just("24"),
    st.sampled_from(["00", "59", "60", "7"]),
    st.sampled_from(["00", "59", "61"]),
    st.just("") | st.text("0123456789", max_size=9).map(lambda f: "." + f),
    zones,
)

words = st.sampled_from(["true", "false", "null", "yes", "no", "on", "off", "y", "n", "~", "=", "<<"]).flatmap(_cased)
strings = st.text("abcxyzEe0189_-+.:~ ", max_size=12)

plain_scalars = st.one_of(ints, floats, dates, timestamps, words, strings)


def _plain_ok(text: str) -> bool:
    """Whether ``text`` stays one plain scalar wherever it goes: not ``- ``, ``? `` or ``: ``
    (a collection's indicators), no ``: `` inside, not ending in ``:``; not ``:`` first either,
    which libyaml refuses in a flow collection (``[:0]``) and ruamel.yaml reads as text."""
    text = text.strip()  # as a plain scalar is read
    return (
        not (text[:1] in ("-", "?") and text[1:2] in ("", " "))
        and text[:1] != ":"
        and ": " not in text
        and not text.endswith(":")
    )


def _quoted(text: str, style: str) -> str:
    if style == "plain" and not _plain_ok(text):
        style = "single"
    if style == "single":
        return "'" + text.replace("'", "''") + "'"
    if style == "double":
        return json.dumps(text)  # JSON's escapes are YAML's
    return text


# Composites, so that a strategy's description stays short (Hypothesis warns past 10 kB).
@st.composite
def scalars(draw: st.DrawFn) -> str:
    return _quoted(draw(plain_scalars), draw(st.sampled_from(["plain", "plain", "plain", "single", "double"])))


@settings(max_examples=400, deadline=None)
@given(scalars())
def test_a_scalar_reads_as_ruamel_reads_it(value: str) -> None:
    _assert_read_alike(f"key: {value}\n")


# -- documents -------------------------------------------------------------------------------


@st.composite
def keys(draw: st.DrawFn) -> str:
    return draw(
        st.one_of(ints, dates, words, strings).filter(
            lambda k: k.strip() == k and k[:1] not in ("", "-", "?", ":", "~")
        )
    )


tags = st.sampled_from(
    [
        "",
        "",
        "",
        "",
        "",
        "!!str ",
        "!!int ",
        "!!float ",
        "!!bool ",
        "!!null ",
        "!!timestamp ",
        "!!binary ",
        "!!set ",
        "!foo ",
    ]
)


@st.composite
def leaves(draw: st.DrawFn) -> str:
    """A scalar, maybe tagged, maybe anchored. ``&@`` becomes a fresh anchor name as the
    document is written (ruamel.yaml warns of one reused). A tag keeps its space even before a
    flow ``,``: ruamel.yaml reads ``[!!str, x]``'s tag as ``!!str,`` (YAML 1.2 ends a tag
    there, as libyaml does)."""
    return draw(st.sampled_from(["", "", "&@ "])) + draw(tags) + draw(scalars())


nodes = st.recursive(
    leaves(),
    lambda inner: (
        st.tuples(st.booleans(), st.lists(inner, max_size=3))
        | st.tuples(st.booleans(), st.lists(st.tuples(keys(), inner), max_size=3, unique_by=lambda kv: kv[0]).map(dict))
    ),
    max_leaves=10,
)


def _flow(node: Any) -> str:
    if isinstance(node, str):
        return node
    _, items = node
    if isinstance(items, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in items.items()) + "}"
    return "[" + ", ".join(_flow(v) for v in items) + "]"


def _block(node: Any, indent: int) -> list[str]:
    """``node`` as the lines of a block collection, or of flow style where drawn so."""
    flow, items = node
    pad = " " * indent
    out = []
    for key, value in items.items() if isinstance(items, dict) else ((None, v) for v in items):
        head = f"{pad}- " if key is None else f"{pad}{key}: "
        if isinstance(value, str) or value[0] or not value[1]:
            out.append((head + _flow(value)).rstrip())
        else:
            out.append(head.rstrip())
            out += _block(value, indent + 2)
    return out


def _document(root: Any) -> str:
    if isinstance(root, str) or root[0] or not root[1]:
        text = _flow(root) + "\n"
    else:
        text = "\n".join(_block(root, 0)) + "\n"
    names = iter(range(text.count("&@")))
    return re.sub("&@", lambda _: f"&a{next(names)}", text)


@st.composite
def documents(draw: st.DrawFn) -> Any:
    """A document's root: mostly a mapping (as a config is), else any node."""
    top = st.tuples(st.booleans(), st.lists(st.tuples(keys(), nodes), max_size=4, unique_by=lambda kv: kv[0]).map(dict))
    return draw(top | nodes)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_a_document_reads_as_ruamel_reads_it(root: Any) -> None:
    _assert_read_alike(_document(root), same_refusal=_depth(root) <= 1)


def _depth(node: Any) -> int:
    if isinstance(node, str):
        return 0
    values = node[1].values() if isinstance(node[1], dict) else node[1]
    return 1 + max((_depth(v) for v in values), default=0)


# -- what a user sees ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written, value",
    [
        ("1_000", 1000),
        ("0b11", 3),
        ("+0x1F", 31),
        ("-0o7", -7),
        ("010", 10),  # YAML 1.2: ten, not octal
        ("2001-12-14", datetime.date(2001, 12, 14)),
        ("2001-12-14T21:59:43Z", datetime.datetime(2001, 12, 14, 21, 59, 43, tzinfo=datetime.UTC)),
        ("no", "no"),  # YAML 1.2: text, not false
        ("'0b11'", "0b11"),
    ],
)
def test_both_readers_read_a_value_the_same(written: str, value: Any) -> None:
    text = f"key: {written}\n"
    assert read(text, FILE).data == {"key": value}
    assert from_round_trip(source.parse(text, FILE)).data == {"key": value}
    assert type(read(text, FILE).data["key"]) is type(value)


@pytest.mark.parametrize(
    "written, message",
    [
        ("0x_", "'0x_' reads as a YAML int but is not a valid one; quote it to keep it a string"),
        (
            "2001-13-45",
            (
                "'2001-13-45' reads as a YAML timestamp but is not a valid one (month must be in 1..12); quote "
                "it to keep it a string"
            ),
        ),
    ],
)
def test_a_value_that_looks_like_a_number_or_date_but_is_not_is_an_error_at_its_place(
    written: str, message: str
) -> None:
    for version in (1, 2):  # format 1 goes through ruamel.yaml, format 2 through marked
        text = f"version: {version}\nlisteners:\n  - name: {written}\n"
        assert [str(p) for p in validate_text(text, FILE).errors] == [f"c.yaml:3:11: error: invalid YAML: {message}"]


def test_a_date_where_text_goes_is_an_error_that_says_to_quote_it_in_either_format() -> None:
    text = textwrap.dedent(
        """\
        version: {version}
        deployments:
          d:
            provider: systemone
            endpoint: http://127.0.0.1:8100/v1/systemone
            model: 2001-12-14
        """
    )
    expected = (
        "c.yaml:6:12: error: deployments.d.model: must be a valid string "
        "(got 2001-12-14, which YAML reads as a date; quote it to make it a string)"
    )
    for version in (1, 2):
        assert [str(p) for p in validate_text(text.format(version=version), FILE).errors] == [expected]
    assert validate_text(text.format(version=2).replace("2001-12-14", "'2001-12-14'"), FILE).valid


def test_a_yaml_version_other_than_1_2_is_refused_by_both_readers() -> None:
    # Under %YAML 1.1 ruamel.yaml would read `yes` as true; libyaml cannot.
    text = "# router\n%YAML 1.1\n---\nversion: 2\n"
    expected = "c.yaml:2:1: error: %YAML 1.1: vllm-sr reads configs as YAML 1.2 only; remove the directive"
    assert _by_marked(text) == _by_ruamel(text) == ("refused", expected)
    assert read("%YAML 1.2\n---\nkey: 1\n", FILE).data == {"key": 1}


def test_an_anchored_true_is_true_in_both_readers() -> None:
    # ruamel.yaml keeps an anchored boolean as an int subclass: it must still read as true.
    text = "a: &t true\nb: *t\n"
    assert _by_marked(text) == _by_ruamel(text) == ("data", _plain({"a": True, "b": True}))


@pytest.mark.parametrize(
    "text, problem",
    [
        ("a: !!set {x}\n", "c.yaml:1:4: error: invalid YAML: the tag !!set has no meaning in a config; remove it"),
        (
            "a:\n  - !!omap [b: 1]\n",
            "c.yaml:2:5: error: invalid YAML: the tag !!omap has no meaning in a config; remove it",
        ),
        ("a: !custom x\n", "c.yaml:1:4: error: invalid YAML: the tag !custom has no meaning in a config; remove it"),
        (
            "a: !!int abc\n",
            (
                "c.yaml:1:4: error: invalid YAML: 'abc' reads as a YAML int but is not a valid one; quote it to "
                "keep it a string"
            ),
        ),
    ],
)
def test_a_tag_the_readers_would_read_differently_is_refused_by_both(text: str, problem: str) -> None:
    assert _by_marked(text) == _by_ruamel(text) == ("refused", problem)


def test_merge_keys_read_alike_own_keys_first() -> None:
    text = "base: &b {x: 1, y: 1}\nentry:\n  y: 2\n  <<: *b\n  z: 3\n"
    assert _by_marked(text) == _by_ruamel(text)
    assert list(read(text, FILE).data["entry"].items()) == [("y", 2), ("z", 3), ("x", 1)]


def test_a_collection_as_a_key_is_an_error_not_a_crash() -> None:
    assert _by_marked("? [a, b]\n: 1\n") == (
        "refused",
        "c.yaml:1:3: error: invalid YAML: a mapping key must be a scalar",
    )
