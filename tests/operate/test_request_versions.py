"""The two versions ``vllm-sr request`` names apart: the listener version an answer carries, and
the config version the control plane says it is part of."""

from __future__ import annotations

from sr_control.operate.request import Reply, render, summarize

PLANE = {"version": "055e69ae9b7fc68b", "listener_versions": {"public": "64e1e000108c77b7", "internal": "0c3f"}}


def _reply(listener_version: str) -> Reply:
    headers = {"x-vsr-config-version": listener_version, "x-vsr-member": "full", "x-request-id": "r-1"}
    return Reply("http://127.0.0.1:8801/v1/systemone", 200, headers, b'{"model": "tiny", "answers": {}}')


def test_a_live_listener_version_is_named_with_its_config_version() -> None:
    summary = summarize(_reply("64e1e000108c77b7"), PLANE)
    assert (summary["listener"], summary["config_version"], summary["live"]) == ("public", PLANE["version"], True)
    assert "config version    055e69ae9b7fc68b  (live on the control plane cp:1, listener public)" in render(
        summary, "cp:1"
    )


def test_a_listener_version_no_longer_live_or_a_silent_control_plane_is_said_so() -> None:
    stale = summarize(_reply("9999"), PLANE)
    assert (stale["config_version"], stale["live"]) == (None, False)
    assert "not a listener version live on the control plane cp:1" in render(stale, "cp:1")
    unknown = summarize(_reply("64e1e000108c77b7"), None)
    assert unknown["live"] is None and unknown["listener_version"] == "64e1e000108c77b7"
    assert "config version    -  (the control plane cp:1 did not answer" in render(unknown, "cp:1")
