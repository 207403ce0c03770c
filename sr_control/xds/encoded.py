"""Responses as wire bytes, serialized once per content and shared by every node they go to.

A response's content (type, version, resources, removals) is the same for every node that
needs the same step of the same edit; only its nonce is the stream's own. So the body is
serialized once, kept by its content, and each stream sends ``body + nonce``: protobuf reads
a field appended to a message as part of it (concatenated messages merge), and the nonce is
a field no body carries. One edit to 2,000 nodes serializes each distinct response once.

``Encoded`` is what a stream returns: the server writes ``wire()``; anything else that reads it
(tests, mostly) sees the response message, parsed from those bytes on first use.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from envoy.service.discovery.v3 import discovery_pb2

from sr_control.compiler.resources import Resource

# Bodies kept, by size: a few versions of a large config (a 1,000-listener config's listeners
# are a few MiB), least recently used first out.
KEEP_BYTES = 128 * 1024 * 1024


class Encoded:
    """One response: its shared body and this stream's nonce."""

    __slots__ = ("_kind", "_message", "body", "nonce")

    def __init__(self, kind: Any, body: bytes, nonce: str) -> None:
        self._kind = kind
        self.body = body
        self.nonce = nonce
        self._message: Any = None

    def wire(self) -> bytes:
        # DiscoveryResponse and DeltaDiscoveryResponse both carry the nonce as field 5.
        return self.body + self._kind(nonce=self.nonce).SerializeToString()

    @property
    def message(self) -> Any:
        if self._message is None:
            self._message = self._kind.FromString(self.wire())
        return self._message

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)

    def __repr__(self) -> str:
        return f"Encoded({self.message})"


def wire(response: Any) -> bytes:
    """The bytes gRPC sends for a stream's response (an Encoded, or a message built elsewhere)."""
    return response.wire() if isinstance(response, Encoded) else bytes(response.SerializeToString())


class Encoder:
    """Serialized bodies by content; counts the bytes it serialized (``encoded_bytes``)."""

    def __init__(self, keep_bytes: int = KEEP_BYTES) -> None:
        self.keep_bytes = keep_bytes
        self.encoded_bytes = 0  # every byte serialized, ever: a metric's source
        self._lock = threading.Lock()
        self._bodies: OrderedDict[Hashable, bytes] = OrderedDict()
        self._size = 0

    def sotw(self, type_url: str, version: str, resources: Sequence[Resource]) -> tuple[bytes, int]:
        """A DiscoveryResponse's body; with the bytes serialized for it now (0 when kept)."""
        key = ("sotw", type_url, version, tuple((r.name, r.version) for r in resources))
        return self._body(
            key,
            lambda: discovery_pb2.DiscoveryResponse(
                version_info=version, type_url=type_url, resources=[r.packed for r in resources]
            ),
        )

    def delta(
        self, type_url: str, version: str, resources: Sequence[Resource], removed: Sequence[str]
    ) -> tuple[bytes, int]:
        """A DeltaDiscoveryResponse's body; with the bytes serialized for it now (0 when kept)."""
        key = ("delta", type_url, version, tuple((r.name, r.version) for r in resources), tuple(removed))
        return self._body(
            key,
            lambda: discovery_pb2.DeltaDiscoveryResponse(
                system_version_info=version,
                type_url=type_url,
                resources=[
                    discovery_pb2.Resource(name=r.name, version=r.version, resource=r.packed) for r in resources
                ],
                removed_resources=removed,
            ),
        )

    def _body(self, key: Hashable, build: Any) -> tuple[bytes, int]:
        with self._lock:
            body = self._bodies.get(key)
            if body is not None:
                self._bodies.move_to_end(key)
                return body, 0
        body = build().SerializeToString()
        with self._lock:
            if key not in self._bodies:
                self._bodies[key] = body
                self._size += len(body)
                while self._size > self.keep_bytes and len(self._bodies) > 1:
                    _, dropped = self._bodies.popitem(last=False)
                    self._size -= len(dropped)
            self.encoded_bytes += len(body)
        return body, len(body)
