"""The internal wire form is lossless: what it reads, it writes back byte for byte (seed 000)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systemone.ir import Batch, Request
from systemone.jsontext import dumps
from systemone.reading import READINGS, read_body
from systemone.writing import internal_doc
from tests.systemone.inputs import corpus, json_values, literals, text

INTERNAL = READINGS["internal"]


def roundtrip(body: bytes) -> str:
    ir, _ = read_body(body, INTERNAL, "decisions")
    return dumps(internal_doc(ir))


@pytest.mark.parametrize(("name", "body"), corpus(), ids=[n for n, _ in corpus()])
def test_generated_corpus_round_trips_byte_for_byte(name: str, body: bytes) -> None:
    assert roundtrip(body).encode("utf-8") == body


def test_corpus_covers_every_legacy_form_and_each_family_selfcheck() -> None:
    from systemone.generated.fields import LEGACY_FORMS
    from systemone.generated.runtime_fields import FAMILIES

    names = {n for n, _ in corpus()}
    assert {f"legacy/{form}" for form in LEGACY_FORMS} <= names
    assert any(n.startswith("selfcheck/") for n in names) and all(
        n.split("/")[1] in FAMILIES for n in names if n.startswith("selfcheck/")
    )


# ---------------------------------------------------------------------------- fuzz corpus

# A literal stands in the structure as a sentinel string, which json.dumps writes as "\u0001...";
# replacing the quoted sentinel with the literal gives text json.dumps could not have written.
_SENTINEL = "\x01"


def _lit(draw: st.DrawFn, choices: st.SearchStrategy[str] = literals) -> str:
    return _SENTINEL + draw(choices) + _SENTINEL


positive_integral = st.sampled_from(["1e3", "1500", "2E+3", "1.0", "30000"])
unit_interval = st.sampled_from(["0.50", "1.0", "0E0", "5e-1", "-0.0", "0.40"])


def _with_literals(value: Any, draw: st.DrawFn) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and draw(st.booleans()):
        return _lit(draw)
    if isinstance(value, dict):
        return {k: _with_literals(v, draw) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_literals(v, draw) for v in value]
    return value


def _text_of(value: Any) -> str:
    out = json.dumps(value, ensure_ascii=False)
    while '"\\u0001' in out:
        start = out.index('"\\u0001')
        end = out.index('\\u0001"', start + 7)
        out = out[:start] + out[start + 7 : end] + out[end + 7 :]
    return out


def _ordered(draw: st.DrawFn, members: dict[str, Any]) -> dict[str, Any]:
    order = draw(st.permutations(list(members)))
    return {k: members[k] for k in order}


def _is_text(value: Any) -> bool:
    return isinstance(value, (str, dict, list))


names = st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=6)


@st.composite
def questions(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["noul", "choice", "score", "set", "span", "box"]))
    q: dict[str, Any] = {"type": kind}
    if draw(st.booleans()) or kind == "box":
        q["instructions"] = draw(text | json_values(4).filter(_is_text))
    if kind == "noul" and draw(st.booleans()):
        q["criteria"] = draw(
            st.none() | st.fixed_dictionaries({}, optional={"true": text | st.none(), "false": text | st.none()})
        )
    elif kind == "choice":
        options = draw(st.lists(names, min_size=2, max_size=5, unique=True))
        q[draw(st.sampled_from(["criteria", "choices"]))] = options
        if "criteria" in q:
            q["criteria"] = {o: draw(st.none() | text) for o in options}
    elif kind == "score":
        q[draw(st.sampled_from(["criteria", "levels"]))] = draw(st.lists(text, min_size=2, max_size=4))
    elif kind in ("set", "span"):
        labels = draw(st.lists(names, min_size=1, max_size=4, unique=True))
        q[draw(st.sampled_from(["criteria", "labels"]))] = labels
        if "criteria" in q:
            q["criteria"] = {label: None for label in labels}
        if draw(st.booleans()):
            q["threshold"] = _lit(draw, unit_interval) if draw(st.booleans()) else draw(st.floats(0, 1))
    if draw(st.booleans()):
        q["preset"] = draw(st.sampled_from(["pii", "jailbreak", "custom"]))
    if draw(st.booleans()):
        q["overflow"] = draw(st.sampled_from(["window", "truncate"]))
    if (
        "instructions" not in q
        and "preset" in q
        and kind != "box"
        and set(q) <= {"type", "preset", "overflow", "threshold"}
    ):
        q["instructions"] = "Answer it."  # keep preset-only questions to the presets' own types
    return _ordered(draw, q)


@st.composite
def internal_requests(draw: st.DrawFn) -> str:
    state = _with_literals(draw(json_values(12).filter(_is_text)), draw)
    members: dict[str, Any] = {"questions": draw(st.dictionaries(names, questions(), min_size=1, max_size=3))}
    if draw(st.booleans()):
        members["states"] = [state, _with_literals(draw(json_values(6).filter(_is_text)), draw)]
    else:
        members["state"] = state
        if isinstance(state, dict) and draw(st.booleans()):
            members["roles"] = {k: draw(st.sampled_from(["user", "context", "answer"])) for k in list(state)[:2]}
    if "roles" not in members and draw(st.booleans()):
        members["roles"] = None
    if draw(st.booleans()):
        members["model"] = draw(names)
    if draw(st.booleans()):
        members["options"] = _ordered(
            draw,
            {
                "deadline_ms": _lit(draw, positive_integral) if draw(st.booleans()) else draw(st.integers(1, 10**6)),
                "return_meta": draw(st.booleans()),
            },
        )
    return _text_of(_ordered(draw, members))


def _is_request(ir: object) -> bool:
    return isinstance(ir, (Request, Batch))


@settings(max_examples=150, deadline=None)
@given(internal_requests())
def test_fuzz_internal_form_round_trips_byte_for_byte(body: str) -> None:
    ir, _ = read_body(body.encode("utf-8"), INTERNAL, "decisions")
    assert _is_request(ir)
    assert dumps(internal_doc(ir)) == body


def test_a_5_0_request_converted_to_the_internal_form_says_it_has_no_roles() -> None:
    ir, _ = read_body(
        b'{"state": {"request": "hi"}, "questions": {"q": {"type": "noul"}}}', READINGS["vllm-sr/5.0"], "systemone"
    )
    internal = dumps(internal_doc(ir))
    assert internal == '{"state": {"request": "hi"}, "questions": {"q": {"type": "noul"}}, "roles": null}'
    again, _ = read_body(internal.encode(), INTERNAL, "decisions")
    assert again.roles.mode == "none" and dumps(internal_doc(again)) == internal


def test_the_5_0_media_rule_is_carried_as_the_internal_media_member() -> None:
    body = (
        b'{"state": ["<i1>", "<v1>", "What happens?"], "assets": {"<i1>": {"format": "png", "data_base64": '
        b'"AA=="}, "<v1>": {"type": "video", "format": "mp4", "data_base64": "AA=="}}, "questions": {"q": '
        b'{"type": "noul"}}}'
    )
    ir, _ = read_body(body, READINGS["vllm-sr/5.0"], "systemone")
    assert ir.state == "What happens?" and ir.media == ("<i1>", "<v1>")
    internal = dumps(internal_doc(ir))
    back, _ = read_body(internal.encode(), INTERNAL, "decisions")
    assert (back.state, back.media) == ("What happens?", ("<i1>", "<v1>"))
    assert dumps(internal_doc(back)) == internal
