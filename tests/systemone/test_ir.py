"""IR nodes built the readers' way are the nodes their __init__ builds."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from systemone.ir import MISSING, QUESTION_SLOTS, Question, read_question
from systemone.jsontext import JsonObject, loads


def test_read_question_sets_every_field_of_a_question() -> None:
    assert QUESTION_SLOTS == tuple(f.name for f in fields(Question))


@pytest.mark.parametrize(
    "raw",
    [
        '{"type": "choice", "instructions": "Which team?", "criteria": {"billing": null, "tech": "Bugs"}}',
        '{"type": "score", "levels": ["low", "high"], "preset": "urgency"}',
        '{"type": "noul"}',
    ],
)
def test_read_question_is_the_question_init_builds(raw: str) -> None:
    q = loads(raw)
    member = next((m for m in ("criteria", "levels") if m in q), "criteria")
    args = (q["type"], q.get("instructions", MISSING), q.get(member, MISSING), member, JsonObject(), tuple(q))
    read = read_question(*args, q)
    assert read == Question(*args) and repr(read) == repr(Question(*args))
    assert all(
        getattr(read, f.name) == getattr(Question(*args), f.name) for f in fields(Question) if f.name != "as_read"
    )
    assert read.as_read is q and read_question(*args, None).as_read is None
    assert replace(read, instructions="Other?").as_read is None  # a changed question drops it
    with pytest.raises(AttributeError):
        read.type = "noul"  # type: ignore[misc]
