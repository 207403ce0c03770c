"""A listener answers an upstream's reply as the reference path does, whichever way it takes.

``answer_success`` sends an upstream's own text, laid out, when writing the reply would give it
back unchanged (``reply_as_sent``), and otherwise reads it with msgspec and writes it with
``dumpb_content``. The reference reads with the standard library and writes with ``dumps``: on
every reply, valid or not, the client gets the same bytes or the same error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systemone import REGISTRY, ClientRequest, ItemResult, Reply, Request
from systemone.jsontext import JsonObject, dumps, stdlib_loads
from systemone.replies import decode_reply, is_whole, reply_doc
from tests.systemone.inputs import json_values

LISTENERS = {s: REGISTRY.listener(s) for s in ("vllm-sr/5.0", "vllm-sr/4.0", "systemone/0.2")}
REQUEST = {
    "model": "vllm-sr/auto",
    "state": {"request": "Charged twice"},
    "questions": {
        "team": {"type": "choice", "criteria": {"billing": None, "tech": None}},
        "urgent": {"type": "noul"},
        "anger": {"type": "score", "criteria": ["calm", "angry"]},
    },
}
BAD_QUESTION = {**REQUEST, "questions": {**REQUEST["questions"], "bad": {"type": "choice", "criteria": {"only": None}}}}


def requests() -> list[ClientRequest]:
    out = []
    for schema, codec in LISTENERS.items():
        out.append(codec.read("/v1/systemone", json.dumps(REQUEST).encode()))
        out.append(codec.read("/v1/systemone", json.dumps(REQUEST, separators=(",", ":")).encode()))
        if schema != "systemone/0.2":
            out.append(codec.read("/v1/decisions", json.dumps(BAD_QUESTION).encode()))
            out.append(
                codec.read("/v1/systemone/batch", json.dumps({"requests": {"a": REQUEST, "b": REQUEST}}).encode())
            )
    out.append(
        LISTENERS["vllm-sr/4.0"].read(
            "/v1/systemone", json.dumps({"states": ["a", "b"], "questions": REQUEST["questions"]}).encode()
        )
    )
    return out


REQUESTS = requests()


def reference(req: ClientRequest, body: bytes) -> Any:
    codec = LISTENERS[req.schema]
    try:
        return dumps(reply_doc(decode_reply(stdlib_loads(body), req.ir), req.ir, req.endpoint, codec.flavour)).encode(
            "utf-8"
        )
    except Exception as exc:  # a malformed reply may fail on any line: both ways fail alike
        return type(exc), str(exc), getattr(exc, "info", None)


def answered(req: ClientRequest, body: bytes) -> Any:
    try:
        return LISTENERS[req.schema].answer_success(req, body)
    except Exception as exc:
        return type(exc), str(exc), getattr(exc, "info", None)


# ---------------------------------------------------------------------------- replies

numbers = st.floats(0, 1) | st.sampled_from([0, 1, "1.0", "1e-5", "-0", "0.50"])
error = st.fixed_dictionaries(
    {
        "type": st.just("noul"),
        "error": st.sampled_from(["invalid_input", "unavailable", "deadline_exceeded"]),
        "message": st.just("no"),
    }
)


@st.composite
def answer(draw: st.DrawFn) -> Any:
    """Mostly an answer; now and then a question error or null."""
    odd = draw(st.integers(0, 9))
    if odd == 9:
        return draw(error)
    if odd == 8:
        return None
    return draw(
        st.fixed_dictionaries(
            {"type": st.just("noul"), "noul": numbers}, optional={"abstain_probability": numbers, "x": json_values(3)}
        )
    )


@st.composite
def replies(draw: st.DrawFn) -> bytes:
    """Replies to REQUEST: mostly what a runtime sends, with drawn departures from it (each
    departure at the top of its draw's range, since hypothesis draws small values most)."""
    ids = (
        draw(st.permutations(["team", "urgent", "anger"]))
        if draw(st.integers(0, 3)) == 3
        else ["team", "urgent", "anger"]
    )
    ids = ids[: draw(st.integers(1, 3))] if draw(st.integers(0, 5)) == 5 else ids
    answers = {i: draw(answer()) for i in ids}
    if draw(st.integers(0, 4)) == 4:
        answers["extra"] = draw(answer())
    odd_model, odd_usage = draw(st.integers(0, 5)) == 5, draw(st.integers(0, 5)) == 5
    model = draw(st.sampled_from(["", None, 7])) if odd_model else "d3"
    doc: dict[str, Any] = {
        "model": model,
        "answers": answers,
        "usage": None if odd_usage else {"input_tokens": 12, "output_tokens": 0},
    }
    if draw(st.booleans()):
        doc["meta"] = draw(json_values(4))
    order = draw(st.permutations(list(doc))) if draw(st.integers(0, 3)) == 3 else list(doc)
    doc = {k: doc[k] for k in order if draw(st.integers(0, 9)) != 9 or k == "answers"}
    if draw(st.integers(0, 6)) == 6:
        doc = {"model": "d3", "responses": {"a": doc, "b": doc}, "usage": {"input_tokens": 24, "output_tokens": 0}}
    text = json.dumps(
        doc, ensure_ascii=draw(st.integers(0, 5)) == 5, separators=draw(st.sampled_from([(", ", ": "), (",", ":")]))
    )
    for literal in ("1.0", "1e-5", "-0", "0.50"):  # numbers as an upstream may write them
        text = text.replace(f'"{literal}"', literal)
    return text.encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(replies(), st.sampled_from(range(len(REQUESTS))))
def test_fuzz_every_reply_is_answered_as_the_reference_answers_it(body: bytes, which: int) -> None:
    req = REQUESTS[which]
    assert answered(req, body) == reference(req, body)


RUNTIME_REPLY = {
    "model": "d3-turbo",
    "answers": {
        "team": {
            "type": "choice",
            "choice": "billing",
            "probabilities": {"billing": 0.9124012, "tech": 0.0875988},
            "confidence": 0.8248024,
        },
        "urgent": {"type": "noul", "noul": 3.2e-05},
        "anger": {
            "type": "score",
            "score": 0.31,
            "legend": {"0": "calm", "1": "angry"},
            "probabilities": {"0": 0.69, "1": 0.31},
            "confidence": 0.38,
        },
    },
    "usage": {"input_tokens": 212, "output_tokens": 0},
    "meta": {"ms": 7},
}


@pytest.mark.parametrize("req", REQUESTS[:2], ids=["dumps layout", "compact"])
def test_a_runtimes_reply_is_sent_back_as_it_came(req: ClientRequest) -> None:
    for layout in ({}, {"separators": (",", ":")}):
        body = json.dumps(RUNTIME_REPLY, **layout).encode()  # type: ignore[arg-type]
        assert answered(req, body) == reference(req, body) == json.dumps(RUNTIME_REPLY).encode()


# ---------------------------------------------------------------------------- whole replies

RUNTIME = LISTENERS["vllm-sr/5.0"]  # a vllm-srun runtime reads /v1/decisions with its own codec


@st.composite
def runtime_results(draw: st.DrawFn, ids: list[str]) -> Reply:
    """A runtime's own answers to questions ``ids``: now and then one missing, failed or null,
    a model name or usage missing, members beside the answers."""
    answers: list[tuple[str, Any]] = []
    for q_id in ids:
        kind = draw(st.integers(0, 12))
        if kind == 12:
            continue
        answers.append(
            (
                q_id,
                draw(error) if kind == 11 else None if kind == 10 else {"type": "noul", "noul": draw(st.floats(0, 1))},
            )
        )
    if draw(st.integers(0, 5)) == 5:
        answers.append(("team.billing", {"type": "noul", "noul": 0.5}))  # a derived id (a set's label)
    usage = (
        None if draw(st.integers(0, 7)) == 7 else JsonObject(input_tokens=draw(st.integers(0, 9999)), output_tokens=0)
    )
    extras = JsonObject(meta=JsonObject(ms=draw(st.integers(0, 99)))) if draw(st.booleans()) else JsonObject()
    model = draw(st.sampled_from(["d3", "d3", "d3", ""]))
    return Reply({"": ItemResult(JsonObject(answers), usage, extras, model or None)}, model or None)


@settings(max_examples=300, deadline=None)
@given(st.data(), st.sampled_from(range(len(REQUESTS))))
def test_fuzz_a_whole_reply_is_the_listeners_answer_byte_for_byte(data: st.DataObject, which: int) -> None:
    """What lets the sidecar send a reply on unread (``x-vsr-reply: whole``): whenever the runtime
    calls its reply whole and the client's listener takes whole replies, reading and re-encoding
    the reply gives back its very bytes."""
    req = REQUESTS[which]
    member = RUNTIME.read("/v1/decisions", req.upstream_body("d3"))
    ids = list(member.ir.questions) if isinstance(member.ir, Request) else []
    reply = data.draw(runtime_results(ids))
    if not (isinstance(member.ir, Request) and is_whole(reply, member.ir)):
        return
    body = RUNTIME.answer_success(member, reply)
    codec = LISTENERS[req.schema]
    if codec.takes_whole(req):
        assert codec.answer_success(req, body) == body
    assert answered(req, body) == reference(req, body)
