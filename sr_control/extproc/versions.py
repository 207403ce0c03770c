"""Sidecar data by version: every version received recently, not just the latest.

Envoy names the version each request was routed with (``x-vsr-config-version``); requests routed
by the previous route table are still in flight after a push, so they must find their own
version here. A version the sidecar has not received yet (the push to Envoy overtook the push to
the sidecar) is waited for, for a bounded time; the caller then answers 503, never with another
version's data (docs/xds/sidecar-versions.md).

Runs on one event loop: the subscription adds, the requests read and wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from sr_control.extproc.data import ListenerData

RETENTION_S = 300.0  # how long a version no route names any more is kept
MAX_VERSIONS = 64  # per listener, whatever their age: a burst of edits cannot grow the store


class VersionStore:
    def __init__(self, retention_s: float = RETENTION_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.retention_s = retention_s
        self._clock = clock
        self._by_version: dict[str, ListenerData] = {}
        self._used: dict[str, float] = {}  # version -> when a request last named it (or arrived)
        self._current: dict[str, ListenerData] = {}  # listener -> its newest version
        self._waiters: dict[str, asyncio.Event] = {}

    def add(self, data: ListenerData) -> None:
        self._by_version[data.version] = data
        self._used[data.version] = self._clock()
        self._current[data.listener] = data
        event = self._waiters.pop(data.version, None)
        if event is not None:
            event.set()
        self.prune()

    def remove(self, listener: str) -> None:
        """The listener left the config: nothing is current for it, but its versions stay for
        the requests still in flight."""
        self._current.pop(listener, None)

    def get(self, version: str) -> ListenerData | None:
        data = self._by_version.get(version)
        if data is not None:
            self._used[version] = self._clock()
        return data

    async def wait(self, version: str, timeout_s: float) -> ListenerData | None:
        """The data of ``version``, waiting up to ``timeout_s`` for it to arrive."""
        data = self.get(version)
        if data is not None or timeout_s <= 0:
            return data
        event = self._waiters.setdefault(version, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            return None
        return self.get(version)

    def current(self) -> dict[str, ListenerData]:
        return dict(self._current)

    def versions(self) -> list[ListenerData]:
        return list(self._by_version.values())

    def prune(self) -> None:
        """Drop versions no request named for the retention time, except each listener's newest."""
        now = self._clock()
        newest = {d.version for d in self._current.values()}
        for version in list(self._by_version):
            if version not in newest and now - self._used[version] > self.retention_s:
                del self._by_version[version]
                del self._used[version]
        per_listener: dict[str, list[str]] = {}
        for version, data in self._by_version.items():
            per_listener.setdefault(data.listener, []).append(version)
        for versions in per_listener.values():
            for version in sorted(versions, key=self._used.__getitem__)[: max(0, len(versions) - MAX_VERSIONS)]:
                if version not in newest:
                    del self._by_version[version]
                    del self._used[version]


__all__ = ["MAX_VERSIONS", "RETENTION_S", "VersionStore"]
