"""JSON text keeps member order and number literals, and writes exactly what json.dumps writes."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systemone.jsontext import (
    DECLINED,
    DuplicateMember,
    JsonObject,
    JsonTextError,
    Number,
    dumpb,
    dumpb_content,
    dumps,
    dumps_layout,
    freeze,
    loads,
    plain,
    read_plain,
    stdlib_loads,
)
from tests.systemone.inputs import json_texts_with_literals, json_values
from tests.systemone.same import same


@pytest.mark.parametrize(
    "text",
    [
        '{"b": 1.0, "a": -0, "c": [1e3, 1E+2, -0.0, 2.50]}',
        '{"z": {"y": {"x": []}}, "a": {}}',
        '["é", "\\u0000\\n\\t\\"\\\\", "😀", 12345678901234567890]',
        '{"": null, " ": true, "k": false}',
    ],
)
def test_text_in_json_dumps_layout_is_written_back_byte_for_byte(text: str) -> None:
    assert dumps(loads(text)) == text


def test_number_literals_stay_as_written_and_read_as_python_would() -> None:
    doc = loads('{"a": 1e3, "b": -0, "c": 1.0}')
    assert [n.literal for n in doc.values()] == ["1e3", "-0", "1.0"]
    assert plain(doc) == json.loads('{"a": 1e3, "b": -0, "c": 1.0}')
    assert dumps(doc, numbers="python") == '{"a": 1000.0, "b": 0, "c": 1.0}'


def test_content_read_from_a_request_cannot_be_changed() -> None:
    doc = loads('{"a": [1, {"b": 2}]}')
    assert isinstance(doc["a"], tuple)
    with pytest.raises(TypeError):
        doc["a"] = 1
    with pytest.raises(TypeError):
        doc["a"][1].update(c=3)


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '{"x": {"k": 1, "k": 1}}'])
def test_an_object_naming_a_member_twice_is_refused(text: str) -> None:
    with pytest.raises(DuplicateMember):
        loads(text)


@pytest.mark.parametrize("text", ["[NaN]", "[Infinity]", '"\\ud800"', "{", b"\xff\xfe"])
def test_text_that_is_not_json_is_refused(text: str | bytes) -> None:
    with pytest.raises(JsonTextError):
        loads(text)


def test_our_own_numbers_must_be_finite() -> None:
    with pytest.raises(ValueError):
        dumps({"noul": float("nan")})


@settings(max_examples=300, deadline=None)
@given(json_values())
def test_fuzz_writing_matches_json_dumps_byte_for_byte(value: object) -> None:
    text = json.dumps(value, ensure_ascii=False)
    assert dumps(loads(text)) == text
    assert dumps(loads(text), ensure_ascii=True) == json.dumps(value)


@settings(max_examples=300, deadline=None)
@given(json_texts_with_literals())
def test_fuzz_literals_survive_and_python_numbers_match_json_dumps(text: str) -> None:
    doc = loads(text)
    assert dumps(doc) == text
    assert dumps(doc, numbers="python") == json.dumps(json.loads(text), ensure_ascii=False)


def test_number_equality_is_by_literal() -> None:
    assert Number("1.0") == Number("1.0") != Number("1")
    assert JsonObject(a=Number("1")) == JsonObject(a=Number("1"))


# ---------------------------------------------------------------------------- msgspec and the reference
#
# loads and dumpb_content run msgspec; stdlib_loads and dumps are the standard library's. On every
# text the two readers give the same content (or the same error), and on every value read from
# text the two writers give the same bytes.

LAYOUTS = [{}, {"separators": (",", ":")}, {"indent": 2}, {"separators": (" ,", " : ")}]


def outcome(read: Callable[[str | bytes], object], text: str | bytes) -> object:
    try:
        return read(text)
    except JsonTextError as exc:
        return (type(exc), str(exc), exc.position)


@settings(max_examples=300, deadline=None)
@given(json_values(), st.sampled_from(LAYOUTS), st.booleans())
def test_fuzz_loads_reads_what_the_standard_library_reads(
    value: object, layout: dict[str, object], ascii_: bool
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_, **layout)  # type: ignore[arg-type]
    for form in (text, text.encode("utf-8")):
        assert same(outcome(loads, form), outcome(stdlib_loads, form))


@settings(max_examples=200, deadline=None)
@given(json_texts_with_literals())
def test_fuzz_loads_keeps_literals_as_the_standard_library_does(text: str) -> None:
    assert same(loads(text), stdlib_loads(text))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40) | st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_fuzz_loads_refuses_what_the_standard_library_refuses(data: bytes) -> None:
    assert same(outcome(loads, data), outcome(stdlib_loads, data))


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": 1, "a": 1}',  # a member named twice: msgspec keeps one
        b'{"x": [{"k": "v", "k": "v"}]}',
        b'{"n": -0}',  # msgspec reads -0 as 0
        b'{"s": "\\u00e9"}',  # dumps writes the character
        b'{"s": "\\/"}',
        b'{"s": "\\ud83d\\ude00"}',
        b'{"s": "\\u001F"}',  # dumps writes \\u001f
        b'{"s": "\\ud800"}',
        b"[NaN]",
        b"\xef\xbb\xbf{}",
    ],
)
def test_text_msgspec_cannot_read_exactly_is_left_to_the_standard_library(text: bytes) -> None:
    assert read_plain(text) is DECLINED
    assert same(outcome(loads, text), outcome(stdlib_loads, text))


@pytest.mark.parametrize(
    "text", [b'{"a":[1,2.50,{"b":null}],"c":"\\u001f\\n\xc3\xa9"}', b" [ 1e3 , -0.0, true ] ", b'"x"', b"12"]
)
def test_text_written_as_dumps_writes_it_is_read_by_msgspec(text: bytes) -> None:
    assert read_plain(text) is not DECLINED
    assert same(loads(text), stdlib_loads(text))
    assert dumps_layout(text) == dumpb(stdlib_loads(text))


@settings(max_examples=300, deadline=None)
@given(json_values(), st.sampled_from(LAYOUTS))
def test_fuzz_dumpb_content_writes_what_dumps_writes(value: object, layout: dict[str, object]) -> None:
    text = json.dumps(value, ensure_ascii=False, **layout)  # type: ignore[arg-type]
    content = stdlib_loads(text)
    assert dumpb_content(content) == dumpb(content)
    assert dumpb_content({"ours": [1, True, None, "é\u2028\x7f"], "read": content}) == dumpb(
        {"ours": [1, True, None, "é\u2028\x7f"], "read": content}
    )
    if read_plain(text) is not DECLINED:
        assert dumps_layout(text.encode("utf-8")) == dumpb(content)


@settings(max_examples=200, deadline=None)
@given(json_texts_with_literals())
def test_fuzz_dumpb_content_keeps_literals(text: str) -> None:
    assert dumpb_content(stdlib_loads(text)) == text.encode("utf-8")


def test_dumpb_content_refuses_what_is_not_json_content() -> None:
    with pytest.raises(TypeError):
        dumpb_content({"a": object()})


@settings(max_examples=300, deadline=None)
@given(
    json_values()
    | json_values().map(freeze)
    | st.lists(st.floats(allow_nan=False) | st.integers() | st.sampled_from([Number("1e3"), Number("-0")]))
)
def test_fuzz_dumpb_writes_what_dumps_writes_floats_and_all(value: object) -> None:
    assert written(dumpb, value) == written(lambda v: dumps(v).encode("utf-8"), value)


def written(write: Callable[[object], bytes], value: object) -> object:
    try:
        return write(value)
    except (TypeError, ValueError) as exc:  # not JSON content; NaN and infinities are refused
        return type(exc)


@pytest.mark.parametrize(
    "value",
    [
        {"a": b"bytes"},
        {"a": {1, 2}},
        {1: "int key"},
        {"f": float("nan")},
        {"e": __import__("enum").IntEnum("E", "A").A},
    ],
)
def test_dumpb_leaves_what_is_not_plain_content_to_dumps(value: object) -> None:
    assert written(dumpb, value) == written(lambda v: dumps(v).encode("utf-8"), value)
