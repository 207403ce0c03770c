"""A fleet of simulated ADS nodes (tests/fleet/nodes.py) on an event loop of its own thread, for
the reliability scenarios, which are synchronous (processes, HTTP clients, threads of traffic).

    with FleetThread("127.0.0.1:18000", envoys=40, sidecars=10) as sim:
        sim.in_step(plane.status()["type_versions"], timeout=5)
        sim.responses()   # node name -> how many responses it has taken
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from sr_control.compiler.settings import XDS_BACKOFF
from tests.fleet.nodes import Fleet


class FleetThread:
    def __init__(self, address: str, *, envoys: int, sidecars: int, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fleet", daemon=True)
        # Reconnecting no later than Envoy and the sidecar do (XDS_BACKOFF, at most 0.5 s): a
        # simulated node waits up to 1.5x its cap (wait * (0.5 + random)), hence the cap / 1.5.
        backoff = (XDS_BACKOFF[0], XDS_BACKOFF[1] / 1.5)
        self.fleet = Fleet(address, envoys=envoys, sidecars=sidecars, backoff=backoff, **options)

    def _run(self, coroutine: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def __enter__(self) -> FleetThread:
        self._thread.start()
        self._run(self.fleet.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._run(self.fleet.__aexit__(None, None, None), timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def in_step(self, versions: Mapping[str, str], timeout: float) -> None:
        """Wait until every node holds ``versions`` (type name -> version); TimeoutError names who does not."""
        self._run(self.fleet.in_step(dict(versions), timeout))

    def responses(self) -> dict[str, int]:
        """Node name -> the responses it has answered (ACK or NACK), since it started."""

        async def count() -> dict[str, int]:
            return {n.name: len(n.acks) for n in self.fleet.nodes}

        return self._run(count())  # type: ignore[no-any-return]


__all__ = ["FleetThread"]
