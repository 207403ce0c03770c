"""What every ADS stream keeps, whatever its protocol: the node, its hooks and one watch per type.

The state-of-the-world and delta streams differ in what they send; they open, watch the
snapshot cache and close the same way, here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from sr_control.xds.cache import SnapshotCache
from sr_control.xds.hooks import Hooks, StreamInfo

Push = Callable[[str], None]  # asks the stream's loop to call on_push(type_url)


class Stream:
    def __init__(self, info: StreamInfo, cache: SnapshotCache, hooks: Hooks, push: Push) -> None:
        self.info = info
        self._cache = cache
        self._hooks = hooks
        self._push = push
        self._nonces = itertools.count(1)
        self._cancels: dict[str, Callable[[], None]] = {}
        self._opened = False

    def _open(self, req: Any) -> None:
        """On the first request: learn the node (sent once, on the first message) and say so."""
        if self._opened:
            return
        if req.HasField("node"):
            self.info.node.CopyFrom(req.node)
        self._opened = True
        self._hooks.opened(self.info)

    def _next_nonce(self) -> str:
        return str(next(self._nonces))

    def _watch(self, t: str, version: str) -> None:
        """Replace the type's watch: ``on_push(t)`` runs once the snapshot leaves ``version``."""
        self._cancel(t)
        cancel = self._cache.watch(self.info.node, t, version, lambda _snapshot: self._push(t))
        if cancel is not None:
            self._cancels[t] = cancel

    def _cancel(self, t: str) -> None:
        cancel = self._cancels.pop(t, None)
        if cancel is not None:
            cancel()

    def _fired(self, t: str) -> None:
        """A watch answers once: forget it without cancelling."""
        self._cancels.pop(t, None)

    def close(self) -> None:
        for cancel in self._cancels.values():
            cancel()
        self._cancels.clear()
        if self._opened:
            self._hooks.closed(self.info)
