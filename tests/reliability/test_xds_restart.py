"""The control plane killed (SIGKILL) and started again under steady traffic through Envoy.

Envoy and the sidecar keep serving the config they hold while no control plane runs, reconnect
when it is back, and resync to the config as it is now, edited meanwhile: a new deployment, a
new pool on the listener the traffic uses, and a new listener. No request fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.extproc.harness import Runtime
from tests.reliability.parts import Stack, stack
from tests.reliability.scenarios import xds_restart

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]


@pytest.fixture(params=["delta", "sotw"])
def killable(request: pytest.FixtureRequest, member: Runtime, tmp_path: Path) -> Iterator[Stack]:
    with stack(tmp_path, member, ads=request.param) as s:
        yield s


def test_envoy_serves_through_a_control_plane_restart_and_resyncs_to_the_edit_made_meanwhile(killable: Stack) -> None:
    r = xds_restart(killable)
    assert r.failures == [], r.failures[:5]
    assert r.answered_while_down > 0  # the last config served while no control plane ran
    assert r.new_pool_status == 200  # the sidecar holds the listener's new data too
    assert killable.envoy.proc.poll() is None and killable.sidecar.proc.poll() is None
