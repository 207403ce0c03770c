"""JSON text keeps member order and number literals, and writes exactly what json.dumps writes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings

from sr_control.systemone.jsontext import DuplicateMember, JsonObject, JsonTextError, Number, dumps, loads, plain
from tests.systemone.inputs import json_texts_with_literals, json_values


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
