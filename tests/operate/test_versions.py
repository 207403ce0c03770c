"""``vllm-sr config versions`` and ``config rollback`` on a real stack, across a control plane restart."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.e2e.envoy_proc import wait_for
from tests.e2e.http_client import request
from tests.operate.stack import Live, second_listener

pytestmark = [pytest.mark.envoy, pytest.mark.slow]
ASK = {
    "state": "The export fails. Open a ticket.",
    "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}},
}
VERSIONS_SCHEMA = {
    "type": "object",
    "required": ["live", "versions"],
    "properties": {
        "live": {"type": ["string", "null"]},
        "versions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["version", "at", "generation", "bytes"],
                "properties": {"version": {"type": "string", "pattern": "^[0-9a-f]{16}$"}, "at": {"type": "string"}},
            },
        },
    },
}


def _versions(live: Live) -> dict:  # type: ignore[type-arg]
    done = live.cli("config", "versions", "--xds", live.plane.status_address, "--format", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    jsonschema.validate(doc, VERSIONS_SCHEMA)
    return doc  # type: ignore[no-any-return]


def _internal_answers(live: Live) -> int:
    try:
        return request(live.ports["internal"], "POST", "/v1/systemone", json.dumps(ASK).encode(), {}).status
    except OSError:
        return 0


def test_rollback_brings_an_earlier_versions_listener_back_and_the_list_survives_a_restart(live: Live) -> None:
    base = live.text()
    with_internal = live.text(extra=second_listener(live.ports["internal"]))
    live.write(with_internal)
    live.wait_synced(with_internal)
    kept = live.status()["version"]
    assert _internal_answers(live) == 200
    live.write(base)
    live.wait_synced(base)
    wait_for(lambda: _internal_answers(live) == 0, timeout=30, what="listener internal to close")

    listed = _versions(live)
    assert listed["live"] == live.status()["version"] != kept
    assert [e["version"] for e in listed["versions"][:2]] == [listed["live"], kept]

    done = live.cli("config", "rollback", kept, "--xds", live.plane.status_address)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"live: {kept} on 2 node(s)" in done.stdout
    assert "ACK  envoy   vllm-sr-envoy" in done.stdout and "ACK  sidecar" in done.stdout
    assert live.status()["version"] == kept
    # Envoy ACKed the listener: it answers (a moment of warming aside).
    wait_for(lambda: _internal_answers(live) == 200, timeout=10, what="listener internal to answer again")
    after = _versions(live)
    assert [e["version"] for e in after["versions"][:3]] == [kept, listed["live"], kept]

    # The list outlives a restart of the control plane (kept under its --state-dir).
    live.plane.stop()
    offline = live.cli("config", "versions", "--state-dir", str(live.directory / "state"), "--format", "json")
    assert json.loads(offline.stdout)["versions"] == after["versions"]
    live.plane.start()
    assert _versions(live)["versions"] == after["versions"]
    live.wait_synced(with_internal)

    text = live.cli("config", "versions", "--xds", live.plane.status_address)
    assert text.stdout.splitlines()[0].startswith(f"* {kept}  ")

    live.write(base)  # as the other tests expect it
    live.wait_synced(base)


def test_rollback_of_a_version_not_kept_exits_2(live: Live) -> None:
    done = live.cli("config", "rollback", "0123456789abcdef", "--xds", live.plane.status_address)
    assert done.returncode == 2 and "version 0123456789abcdef is not kept" in done.stderr
    got = live.cli("config", "get", "0123456789abcdef", "--xds", live.plane.status_address)
    assert got.returncode == 2 and "the source of version 0123456789abcdef is not kept" in got.stderr
    from tests.e2e.envoy_proc import free_port

    gone = live.cli("config", "versions", "--xds", f"127.0.0.1:{free_port()}")
    assert gone.returncode == 2 and "the control plane does not answer" in gone.stderr
