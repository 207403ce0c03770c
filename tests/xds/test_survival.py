"""The control plane outlives its own bugs: an unexpected error in a reload is logged with its
traceback, counted and shown, the version served keeps serving, and the next edit is read.
Liveness (``/livez``) fails only when the file watch itself has stopped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sr_control.compiler import Settings, incremental
from sr_control.xds import ControlPlane, watch
from tests.xds.test_plane import get
from tests.xds.xds_support import config_text, wait_for


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[tuple[ControlPlane, Path]]:
    path = tmp_path / "config.yaml"
    path.write_text(config_text({"public": 8801}))
    cp = ControlPlane(path, Settings(), host="127.0.0.1", port=0, status_port=0, poll_interval=0.005)
    cp.start()
    yield cp, path
    cp.stop()


def replace(path: Path, text: str) -> None:
    """An edit as editors make it: a new file renamed over the old. Written in place, the watch
    could catch the file half-written under load and serve that (a valid config of no listeners
    was once served between the two edits here)."""
    new = path.with_suffix(".new")
    new.write_text(text)
    os.replace(new, path)


def status(cp: ControlPlane) -> dict[str, Any]:
    return json.loads(get(cp.status_port, "/status")[1])  # type: ignore[no-any-return]


def test_an_unexpected_error_is_reported_and_the_next_edit_is_still_served(
    plane: tuple[ControlPlane, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cp, path = plane
    served = status(cp)["version"]
    real_listener = incremental.listener_dict

    def listener(offer: Any, **kwargs: Any) -> Any:
        if offer.name == "boom":  # a bug in the compiler, as a template lookup or a conversion might have
            raise KeyError("no template 'listener/boom'")
        return real_listener(offer, **kwargs)

    monkeypatch.setattr(incremental, "listener_dict", listener)
    replace(path, config_text({"public": 8801, "boom": 8802}))
    error = wait_for(lambda: status(cp)["last_error"], what="the error to show in /status")
    assert error["result"] == "error"
    assert "KeyError" in error["problems"][0]["message"] and "listener/boom" in error["problems"][0]["message"]
    log = "".join(capsys.readouterr())  # the log goes to stderr once configured, stdout before
    assert "config reload failed unexpectedly" in log and "Traceback (most recent call last)" in log
    assert 'vsr_config_reload_total{result="error"} 1.0' in get(cp.status_port, "/metrics")[1]
    assert status(cp)["version"] == served  # still serving the last good version
    assert get(cp.status_port, "/healthz")[0] == 200
    assert get(cp.status_port, "/livez") == (200, "alive\n")

    replace(path, config_text({"public": 8801, "internal": 8803}))
    wait_for(lambda: status(cp)["resources"].get("listeners") == 2, what="the next edit to be served")
    assert status(cp)["generation"] == 2


# The test ends the watch thread on purpose; pytest would report it as a failure otherwise.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_stopped_watch_fails_liveness_but_not_readiness(
    plane: tuple[ControlPlane, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cp, path = plane
    assert get(cp.status_port, "/livez") == (200, "alive\n")

    def fingerprint(path: Path) -> Any:
        raise SystemExit("stopped from within")  # not an Exception: the loop cannot carry on

    monkeypatch.setattr(watch, "fingerprint", fingerprint)
    code, body = wait_for(lambda: (r := get(cp.status_port, "/livez"))[0] == 503 and r, what="liveness to fail")
    assert "config watch stopped" in body
    assert get(cp.status_port, "/healthz")[0] == 200  # the version served is still served
    assert status(cp)["watch"] == "stopped"
    assert "config watch stopped" in "".join(capsys.readouterr())


def test_the_file_watch_carries_on_after_an_error_in_its_callback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("a")
    calls: list[int] = []

    def on_change() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first change fails")

    w = watch.FileWatch(path, on_change, interval=0.005)
    w.start()
    try:
        path.write_text("bb")
        wait_for(lambda: calls, what="the first change")
        path.write_text("ccc")
        wait_for(lambda: len(calls) == 2, what="the second change")
        assert w.alive()
        assert "RuntimeError: first change fails" in "".join(capsys.readouterr())
    finally:
        w.stop()
