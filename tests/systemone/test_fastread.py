"""The short way and the general reader read every body alike.

``read_body`` has msgspec read the text and check the common form first (``fastread``); the
general reader (``read_doc`` on the standard library's parse) reads everything. On every body,
valid or not, the two give the same IR (same types, same member order), the same legacy forms,
or the same error; and the internal form a listener sends is what ``internal_doc`` writes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systemone import REGISTRY, ProtocolError
from systemone.ir import Batch, Request
from systemone.jsontext import DECLINED, dumpb
from systemone.reading import READINGS, parse_json, read_body, read_doc
from systemone.writing import internal_body, internal_doc
from tests.systemone.inputs import corpus, json_values, text
from tests.systemone.same import same

READS = [
    ("vllm-sr/5.0", "systemone"),
    ("vllm-sr/4.0", "systemone"),
    ("systemone/0.2", "systemone"),
    ("internal", "decisions"),
    ("vllm-sr/5.0", "batch"),
]


def general(body: bytes, schema: str, endpoint: str) -> Any:
    try:
        return read_doc(parse_json(body, DECLINED), READINGS[schema], endpoint)  # type: ignore[arg-type]
    except ProtocolError as exc:
        return exc.info


def fast_first(body: bytes, schema: str, endpoint: str) -> Any:
    try:
        return read_body(body, READINGS[schema], endpoint)  # type: ignore[arg-type]
    except ProtocolError as exc:
        return exc.info


def reads_alike(body: bytes) -> None:
    for schema, endpoint in READS:
        got, want = fast_first(body, schema, endpoint), general(body, schema, endpoint)
        assert same(got, want), (schema, endpoint, got, want)
        if isinstance(got, tuple):
            ir = got[0]
            assert internal_body(ir) == dumpb(internal_doc(ir))
            for model in ("vela3-fast", "d3"):
                assert internal_body(ir, model) == dumpb(internal_doc(_named(want[0], model)))


def _named(ir: Request | Batch, model: str) -> Request | Batch:
    """``ir`` with ``model`` wherever it names a model."""
    if isinstance(ir, Request):
        return ir if ir.model is None else replace(ir, model=model)
    items = {n: r if r.model is None else replace(r, model=model) for n, r in ir.items.items()}
    return replace(ir, model=None if ir.model is None else model, items=items)


# ---------------------------------------------------------------------------- bodies

names = st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=6)
texts = text | json_values(6).filter(lambda v: isinstance(v, (str, dict, list)))


@st.composite
def questions(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["noul", "choice", "score", "box", "span", "set", "track"]))
    q: dict[str, Any] = {"type": kind}
    if draw(st.booleans()):
        q["instructions"] = draw(texts | st.none())
    if kind == "noul" and draw(st.booleans()):
        q["criteria"] = draw(
            st.none() | st.fixed_dictionaries({}, optional={"true": texts | st.none(), "false": texts | st.none()})
        )
    elif kind in ("choice", "span", "set"):
        q["criteria"] = draw(st.dictionaries(names, texts | st.none(), min_size=1, max_size=4))
    elif kind == "score":
        q["criteria"] = draw(st.lists(texts, min_size=1, max_size=4))
    return {k: q[k] for k in draw(st.permutations(list(q)))}


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """Requests of the common form, and near it: each drawn change may make it invalid or rare."""
    state = draw(texts)
    doc: dict[str, Any] = {
        "state": state,
        "questions": draw(st.dictionaries(names, questions(), min_size=1, max_size=4)),
    }
    if draw(st.booleans()):
        doc["model"] = draw(st.sampled_from(["vllm-sr/auto", "d3", "jev-latest"]))
    if isinstance(state, dict) and draw(st.booleans()):
        doc["roles"] = {
            k: draw(st.sampled_from(["user", "context", "answer"])) for k in list(state)[: draw(st.integers(0, 3))]
        }
    elif draw(st.booleans()):
        doc["roles"] = None
    if draw(st.booleans()):
        doc["options"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "deadline_ms": st.integers(-1, 10**5),
                    "return_meta": st.booleans(),
                    "long_context": st.booleans(),
                },
            )
        )
    for change in draw(st.lists(st.sampled_from(CHANGES), max_size=2)):
        change(doc, draw)
    return {k: doc[k] for k in draw(st.permutations(list(doc)))}


def _unknown(doc: dict[str, Any], draw: st.DrawFn) -> None:
    doc["temperature"] = 0


def _question_extra(doc: dict[str, Any], draw: st.DrawFn) -> None:
    if not doc.get("questions"):
        return
    q = next(iter(doc["questions"].values()))
    q[draw(st.sampled_from(["preset", "over", "head", "choices", "levels", "labels", "threshold", "weird"]))] = draw(
        st.sampled_from(["pii", ["a", "b"], 0.5])
    )


def _empty_id(doc: dict[str, Any], draw: st.DrawFn) -> None:
    doc["questions"] = {**doc.get("questions", {}), "": {"type": "noul"}}


def _state(doc: dict[str, Any], draw: st.DrawFn) -> None:
    doc["state"] = draw(st.sampled_from([None, 3, ["⟦img-1⟧", "x"], {"k": "v"}]))


def _roles(doc: dict[str, Any], draw: st.DrawFn) -> None:
    doc["roles"] = draw(st.sampled_from([{"nokey": "user"}, {"k": "boss"}, [], "user"]))


def _drop(doc: dict[str, Any], draw: st.DrawFn) -> None:
    doc.pop(draw(st.sampled_from(["state", "questions", "model"])), None)


def _media(doc: dict[str, Any], draw: st.DrawFn) -> None:
    doc["assets"] = draw(st.sampled_from([None, {"⟦img-1⟧": {"format": "png", "data_base64": "AA=="}}]))
    doc["state"] = ["⟦img-1⟧", "What is it?"]


def _legacy(doc: dict[str, Any], draw: st.DrawFn) -> None:
    doc.pop("state", None)
    doc["states"] = ["a", {"k": "v"}]


def _batch(doc: dict[str, Any], draw: st.DrawFn) -> None:
    doc["requests"] = {"one": {"state": "x", "questions": {"q": {"type": "noul"}}}}


def _anything(doc: dict[str, Any], draw: st.DrawFn) -> None:
    """Any JSON where a member of a request, a question or an asset was."""
    questions = doc.get("questions")
    places = [doc, *(q for q in questions.values() if isinstance(q, dict))] if isinstance(questions, dict) else [doc]
    place = draw(st.sampled_from(places))
    name = draw(
        st.sampled_from(
            [
                "type",
                "preset",
                "instructions",
                "criteria",
                "choices",
                "levels",
                "labels",
                "overflow",
                "threshold",
                "over",
                "model",
                "state",
                "states",
                "roles",
                "questions",
                "options",
                "assets",
                "images",
                "media",
                "requests",
            ]
        )
    )
    place[name] = draw(
        json_values(4)
        | st.sampled_from([{}, {"a": 1}, [{}], {"⟦img-1⟧": {"type": {}, "data_base64": "AA=="}}, [{"format": {}}]])
    )


CHANGES = [_unknown, _question_extra, _empty_id, _state, _roles, _drop, _media, _legacy, _batch, _anything]
LAYOUTS = [{}, {"separators": (",", ":")}, {"indent": 1}]


@settings(max_examples=400, deadline=None)
@given(requests(), st.sampled_from(LAYOUTS), st.booleans())
def test_fuzz_every_body_is_read_as_the_general_reader_reads_it(
    doc: dict[str, Any], layout: dict[str, Any], ascii_: bool
) -> None:
    reads_alike(json.dumps(doc, ensure_ascii=ascii_, **layout).encode("utf-8"))


@pytest.mark.parametrize(("name", "body"), corpus(), ids=[n for n, _ in corpus()])
def test_the_corpus_is_read_as_the_general_reader_reads_it(name: str, body: bytes) -> None:
    reads_alike(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"state": "x", "questions": {"q": {"type": "noul"}, "q": {"type": "noul"}}}',  # a member twice
        b'{"state": "x", "questions": {"q": {"type": "noul", "instructions": "\\u00e9"}}}',
        b'{"state": "x", "questions": {"q": {"type": "choice", "criteria": {"a": null}}}}',
        b'{"state": "x", "questions": {"q": {"type": "score", "criteria": {"0": "low", "1": "high"}}}}',
        b'{"state": "x", "questions": {"q": {"type": "noul", "criteria": {"true": "yes", "maybe": "?"}}}}',
        b'{"state": "x", "questions": {"q": {"type": "noul"}}, "options": {"deadline_ms": 1e3}}',
        b'{"state": "x", "questions": {"q": {"type": "noul"}}, "options": {"deadline_ms": 0}}',
        b'{"state": "x", "questions": {"q": {"type": "noul"}}, "roles": {"request": "user"}}',
        b'{"state": ["a"], "questions": {"q": {"type": "noul"}}, "roles": {}}',
        b'{"state": {"request": "x"}, "questions": {"q": {"type": "noul"}}, "roles": {"request": "user"}, "model": 3}',
        b'{"state": "x", "questions": {}}',
        b"[]",
        b"{",
    ],
)
def test_near_misses_are_read_as_the_general_reader_reads_them(body: bytes) -> None:
    reads_alike(body)


def test_the_common_form_takes_the_short_way() -> None:
    from systemone import fastread
    from systemone.jsontext import loads, read_plain, read_shape

    body = json.dumps(
        {
            "model": "vllm-sr/auto",
            "state": {"request": "hi"},
            "roles": {"request": "user"},
            "questions": {"q": {"type": "choice", "criteria": {"a": None, "b": "B"}}},
        }
    ).encode()
    for schema in ("vllm-sr/5.0", "vllm-sr/4.0", "internal"):
        assert fastread.read(read_plain(body), READINGS[schema], "systemone", source=body) is not None
    # A body the standard library reads (here: a Python client's default \u escapes) is common too.
    escaped = json.dumps({**json.loads(body), "state": {"request": "héllo"}}).encode()
    assert read_plain(escaped) is DECLINED
    assert fastread.read(read_shape(escaped), READINGS["vllm-sr/5.0"], "systemone", content=loads(escaped)) is not None


# ---------------------------------------------------------------------------- the listener's bodies


def test_a_convert_plan_and_a_new_model_write_what_internal_doc_writes() -> None:
    body = json.dumps(
        {
            "model": "vllm-sr/auto",
            "state": {"request": "hi"},
            "questions": {"q": {"type": "noul", "instructions": "Is it?"}},
        },
        separators=(",", ":"),
    ).encode()
    v50 = REGISTRY.listener("vllm-sr/5.0")
    req = v50.read("/v1/systemone", body)
    assert (
        req.plan.body
        == dumpb(internal_doc(req.ir))
        == (
            b'{"model": "vllm-sr/auto", "state": {"request": "hi"}, "questions": {"q": {"type": "noul", '
            b'"instructions": "Is it?"}}, "roles": null}'
        )
    )
    assert req.upstream_body() == req.upstream_body("vllm-sr/auto") == req.plan.body
    assert req.upstream_body("d3-turbo") == dumpb(internal_doc(replace(req.ir, model="d3-turbo")))
    assert b'"model": "d3-turbo"' in req.upstream_body("d3-turbo")


def test_a_passthrough_plan_is_the_clients_bytes_until_the_model_changes() -> None:
    body = (
        b'{"model":"vllm-sr/auto","state":"refund please","questions":{"q":{"type":"noul","instructions":"Refund?"}}}'
    )
    req = REGISTRY.listener("vllm-sr/4.0").read("/v1/systemone", body)
    assert req.plan.kind == "passthrough" and req.upstream_body() == req.upstream_body("vllm-sr/auto") == body
    named = req.upstream_body("d3")
    assert named == dumpb(internal_doc(replace(req.ir, model="d3")))
    assert json.loads(named) == {**json.loads(body), "model": "d3"}


def test_a_request_that_names_no_model_still_names_none() -> None:
    body = b'{"state":"refund please","questions":{"q":{"type":"noul","instructions":"Refund?"}}}'
    for schema in ("vllm-sr/4.0", "vllm-sr/5.0"):
        req = REGISTRY.listener(schema).read("/v1/systemone", body)
        assert req.upstream_body("d3") == req.plan.body
        assert internal_body(req.ir, "d3") == internal_body(req.ir) == dumpb(internal_doc(req.ir))


def test_a_batch_names_the_new_model_wherever_it_named_one() -> None:
    body = json.dumps(
        {
            "model": "vllm-sr/auto",
            "requests": {
                "a": {"model": "vllm-sr/auto", "state": "x", "questions": {"q": {"type": "noul"}}},
                "b": {"state": "y", "questions": {"q": {"type": "noul"}}},
            },
        }
    ).encode()
    req = REGISTRY.listener("vllm-sr/5.0").read("/v1/systemone/batch", body)
    out = json.loads(req.upstream_body("d3"))
    assert out["model"] == "d3" and out["requests"]["a"]["model"] == "d3" and "model" not in out["requests"]["b"]
    states = REGISTRY.listener("vllm-sr/4.0").read(
        "/v1/systemone", b'{"model": "vllm-sr/auto", "states": ["a", "b"], "questions": {"q": {"type": "noul"}}}'
    )
    assert json.loads(states.upstream_body("d3"))["model"] == "d3"
