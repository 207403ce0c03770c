"""A config edit while requests flow: each request is read, routed and answered by one version.

The edit switches listener ``v40`` from vllm-sr/4.0 to vllm-sr/5.0 and takes ``capped`` out of
``vllm-sr/auto``. Every answer names the version that answered it (``x-vsr-config-version``),
and what it says must be what that version says: a pool answer from ``capped`` only under the
old version, a 4.0-only form accepted only under the old version.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from tests.extproc.harness import World

pytestmark = pytest.mark.envoy

STATE = "Our export button fails with a 500 since this morning. Open a ticket."
VALID = {
    "model": "vllm-sr/auto",
    "state": STATE,
    "questions": {"pick": {"type": "choice", "instructions": "Which?", "criteria": {f"o{i}": None for i in range(6)}}},
}
LEGACY = {"model": "tiny", "state": STATE, "questions": {"pick": {"type": "choice", "choices": ["a", "b"]}}}


def test_no_request_is_answered_with_a_mix_of_versions_and_none_fails(world: World) -> None:
    old = world.plane_sidecar_version("v40")
    seen: list[tuple[str, str, int, dict]] = []  # type: ignore[type-arg]
    stop = threading.Event()

    def client(kind: str, body: dict) -> None:  # type: ignore[type-arg]
        while not stop.is_set():
            reply = world.post("v40", "/v1/systemone", body)
            seen.append((kind, reply.headers.get("x-vsr-config-version", ""), reply.status, reply.json()))

    threads = [threading.Thread(target=client, args=("valid", VALID)) for _ in range(3)] + [
        threading.Thread(target=client, args=("legacy", LEGACY))
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        world.apply(world.render(v40_schema="vllm-sr/5.0", auto=("full",)))
        new = world.plane_sidecar_version("v40")
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        world.apply(world.render())
    assert new != old
    versions = Counter(v for _, v, _, _ in seen)
    assert set(versions) == {old, new}, versions  # both versions answered while the edit went live
    for kind, version, status, body in seen:
        if kind == "valid":
            assert status == 200, body  # none fails
            assert body["model"] in (("tiny", "tiny-26") if version == old else ("tiny",)), (version, body)
        elif version == old:
            assert status == 200, body  # 4.0's `choices`, read by the 4.0 listener it was sent to
        else:
            assert status == 400 and body["reason"] == "unknown_member" and "error" not in body, body
