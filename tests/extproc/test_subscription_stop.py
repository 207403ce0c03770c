"""A sidecar that stops as its xDS stream breaks stops quietly.

The race (the stream's read, cancelled by the stop, fails with the call's status instead of
ending as cancelled) cannot be timed against a real control plane, so the call here is a
stand-in whose read does just that."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2

from sr_control.extproc.subscription import Subscription
from sr_control.extproc.versions import VersionStore


class _Refused(grpc.aio.AioRpcError):
    def __init__(self) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "refused")


class _BreaksAsItStops:
    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription

    def DeltaAggregatedResources(self, requests: Any) -> _BreaksAsItStops:  # noqa: N802 - the gRPC name
        return self

    async def read(self) -> Any:
        # gRPC's read, cancelled as its call fails, ends with the call's status, not as cancelled.
        self.subscription.stop()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise _Refused() from None

    def cancel(self) -> None:
        pass


def test_a_read_that_fails_as_the_sidecar_stops_prints_no_traceback() -> None:
    unhandled: list[dict[str, Any]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: unhandled.append(context))
        subscription = Subscription("127.0.0.1:1", VersionStore(), base_pb2.Node(id="sidecar-0"))
        await asyncio.wait_for(subscription._stream(_BreaksAsItStops(subscription)), 5)
        await asyncio.sleep(0)
        gc.collect()  # an unretrieved task exception is reported when the task is collected

    asyncio.run(main())
    assert unhandled == []
