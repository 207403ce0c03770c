"""Envoy templates: every type they name is importable, and filling checks its placeholders."""

from __future__ import annotations

import re

import pytest
from google.protobuf import symbol_database

import sr_control.compiler.protos  # noqa: F401 - registers every type the templates name
from sr_control.compiler.templates import Template, TemplateError, fill, template_files, templates


def test_every_type_a_template_names_is_known_to_the_parser() -> None:
    named = set()
    for file in template_files():
        named |= set(re.findall(r'"@type":\s*type\.googleapis\.com/([\w.]+)', file.read_text()))
    assert named, "no @type found: the pattern no longer matches the templates"
    db = symbol_database.Default()
    for full_name in sorted(named):
        db.GetSymbol(full_name)  # raises KeyError when protos.py lacks the import


def test_a_missing_value_is_named() -> None:
    with pytest.raises(TemplateError, match=r"template route/local_reply: missing body, headers"):
        fill("route/local_reply", name="x", match={}, status=404)


def test_a_value_without_a_placeholder_is_named() -> None:
    with pytest.raises(TemplateError, match="no placeholder for statsu"):
        fill("route/local_reply", name="x", match={}, status=404, statsu=1, body="", headers=[])


def test_an_unknown_template_lists_the_known_ones() -> None:
    with pytest.raises(TemplateError, match="have: .*route/local_reply"):
        fill("route/nope")


def test_values_are_data_and_none_drops_the_key() -> None:
    t = Template("t", {"a": "$a", "b": ["$b", "keep"], "c": "pre-${c}-post", "d": {"e": "$e"}})
    assert t.fill({"a": {"x": [1]}, "b": None, "c": 7, "e": None}) == {
        "a": {"x": [1]},
        "b": ["keep"],
        "c": "pre-7-post",
        "d": {},
    }


def test_every_template_fills_to_independent_trees() -> None:
    first = fill("route/local_reply", name="x", match={"path": "/a"}, status=404, body="{}", headers=[])
    first["direct_response"]["status"] = 500
    second = fill("route/local_reply", name="x", match={"path": "/a"}, status=404, body="{}", headers=[])
    assert second["direct_response"]["status"] == 404


def test_templates_load_once() -> None:
    assert templates() is templates()
