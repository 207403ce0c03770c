"""What a stream reports as it runs: a dataclass of optional callables (go-control-plane's
``CallbackFuncs``). The status ledger and the metrics are hooks; tests use them too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from envoy.config.core.v3 import base_pb2

Protocol = Literal["sotw", "delta"]


@dataclass(eq=False)
class StreamInfo:
    """One ADS stream: which node, over which protocol, from where, since when."""

    id: int
    protocol: Protocol
    peer: str
    node: base_pb2.Node = field(default_factory=base_pb2.Node)
    opened_at: datetime = field(default_factory=lambda: datetime.now(UTC))


def _nothing(*args: object) -> None:
    return None


@dataclass(frozen=True)
class Hooks:
    # A stream's first request arrived (its node is known).
    opened: Callable[[StreamInfo], None] = _nothing
    closed: Callable[[StreamInfo], None] = _nothing
    # A response went out: (stream, type URL, version, nonce).
    pushed: Callable[[StreamInfo, str, str, str], None] = _nothing
    # The node ACKed our push of this version.
    acked: Callable[[StreamInfo, str, str], None] = _nothing
    # The node holds the version we serve without a push: it (re)connected holding it, or the
    # config went back to what it held after it refused another.
    resumed: Callable[[StreamInfo, str, str], None] = _nothing
    # The node rejected a push: (stream, type URL, rejected version, Envoy's message).
    nacked: Callable[[StreamInfo, str, str, str], None] = _nothing
    # A request came from the node, as read (tests compare a simulated node's with Envoy's).
    received: Callable[[StreamInfo, Any], None] = _nothing
    # A response body was serialized, of this many bytes: (stream, type URL, bytes). Bodies are
    # shared by every stream that sends the same content, so this is once per content, not per node.
    encoded: Callable[[StreamInfo, str, int], None] = _nothing

    @staticmethod
    def chain(*hooks: Hooks) -> Hooks:
        """Hooks that call each of ``hooks`` in turn."""

        def each(name: str) -> Callable[..., None]:
            calls = [getattr(h, name) for h in hooks]

            def call_each(*args: object) -> None:
                for call in calls:
                    call(*args)

            return call_each

        return Hooks(
            **{
                name: each(name)
                for name in ("opened", "closed", "pushed", "acked", "resumed", "nacked", "received", "encoded")
            }
        )
