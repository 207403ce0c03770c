"""Edits that must never be served, made while traffic flows through Envoy: a YAML syntax
error, a schema error, a pool naming a deployment that does not exist, and a valid edit met by
a broken Envoy template (a fault outside the file, injected in this process).

Each is refused: the version served keeps serving (Envoy and the sidecar keep what they ACKed),
the problem is in the log and in /status with the file and, for the file's own errors, the
line, and the reload metric counts it. The next valid edit is served. No request fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.extproc.harness import Runtime
from tests.reliability.parts import Stack, stack
from tests.reliability.scenarios import invalid_edits

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]


@pytest.fixture
def editable(member: Runtime, tmp_path: Path) -> Iterator[Stack]:
    with stack(tmp_path, member, in_process=True) as s:
        yield s


def test_invalid_edits_are_never_served_and_no_request_fails(editable: Stack) -> None:
    r = invalid_edits(editable)
    assert [x.edit for x in r.refusals] == ["yaml syntax", "schema", "dangling pool member", "template error"]
    for x in r.refusals:
        assert x.result == ("error" if x.edit == "template error" else "invalid"), x
        assert x.served_after == x.served_before and x.still_acked, x
        assert x.metric_delta == 1, x
        assert x.problems and x.logged, x
        for where in (*x.problems, *x.logged):
            assert where["file"] == str(editable.config), where
            if x.edit != "template error":
                assert where["line"] > 0, where  # the file's own error: its line
    assert (
        "TemplateError" in r.refusals[-1].problems[0]["message"] and "listner" in r.refusals[-1].problems[0]["message"]
    )
    assert r.next_valid_served
    assert r.failures == [], r.failures[:5]
