"""``vllm-srun serve`` under overload: bursts of more concurrent requests than the scheduler
admits (``--max-queue 2``) get 529 ``overloaded`` with ``Retry-After`` at once, never a timeout,
and once the load drops every request is answered.
"""

from __future__ import annotations

import json

import pytest

from tests.reliability.runtime_scenarios import Tuned, overload

pytestmark = pytest.mark.timeout(120)


def test_a_burst_over_the_queue_gets_529_with_retry_after_and_the_server_recovers(tuned: Tuned) -> None:
    r = overload(tuned, clients=24, bursts=2)
    assert r.failures == [], [
        (f.status, f.error, f.headers, f.body[:200]) for f in r.failures
    ]  # 200 or 529, none timed out
    assert r.overloaded and r.statuses[200] > 0, r.statuses  # the bursts were more than it admits
    for x in r.overloaded:
        assert x.headers["retry-after"] == "1" and x.headers["retry-after-ms"] == "1000"
        assert json.loads(x.body)["code"] == "overloaded"
    assert r.after.failed == 0 and r.after.sent > 0
