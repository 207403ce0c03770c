"""A state-of-the-world ADS stream, without gRPC: requests and pushes in, responses out.

Rules (Envoy's xDS protocol):

- A request whose ``response_nonce`` is not the last one sent for its type is stale (a newer
  response is on its way) and is ignored.
- A request with ``error_detail`` is a NACK: it is reported, and nothing is resent until a new
  snapshot arrives: resending the version Envoy just refused would only be refused again.
- The first request of a type is answered when the snapshot differs from the version Envoy says
  it holds: after a control-plane restart an unchanged config sends nothing.
- A type is answered again when its version changes (through a watch) or when the requested
  names change (Envoy asks for a new listener's routes).
"""

from __future__ import annotations

from dataclasses import dataclass

from envoy.service.discovery.v3 import discovery_pb2

from sr_control.xds.cache import SnapshotCache
from sr_control.xds.hooks import Hooks, StreamInfo
from sr_control.xds.snapshot import Snapshot
from sr_control.xds.stream import Push, Stream


@dataclass(frozen=True, slots=True)
class Sent:
    version: str
    nonce: str
    names: frozenset[str]


class SotwStream(Stream):
    def __init__(self, info: StreamInfo, cache: SnapshotCache, hooks: Hooks, push: Push) -> None:
        super().__init__(info, cache, hooks, push)
        self._sent: dict[str, Sent] = {}
        self._names: dict[str, frozenset[str]] = {}

    def on_request(self, req: discovery_pb2.DiscoveryRequest) -> list[discovery_pb2.DiscoveryResponse]:
        self._open(req)
        t = req.type_url
        sent = self._sent.get(t)
        names = frozenset(req.resource_names) - {"*"}
        if req.response_nonce and (sent is None or req.response_nonce != sent.nonce):
            return []
        self._names[t] = names
        snapshot = self._cache.snapshot(self.info.node)
        if sent is not None and req.response_nonce:
            if req.HasField("error_detail"):
                self._hooks.nacked(self.info, t, sent.version, req.error_detail.message)
            else:
                self._hooks.acked(self.info, t, sent.version)
            if snapshot is not None and names != sent.names:
                return [self._respond(t, snapshot)]
            self._watch(t, sent.version)
            return []
        if sent is None:
            # First request of this type on this stream: Envoy says what it already holds.
            if req.version_info and snapshot is not None and snapshot.type_version(t) == req.version_info:
                self._hooks.resumed(self.info, t, req.version_info)
            if snapshot is not None and snapshot.type_version(t) != req.version_info:
                return [self._respond(t, snapshot)]
            self._watch(t, req.version_info)
            return []
        # A request without a nonce after we have answered: a client restarting the type.
        return [self._respond(t, snapshot)] if snapshot is not None else []

    def on_push(self, type_url: str) -> list[discovery_pb2.DiscoveryResponse]:
        """A watch fired: the snapshot changed since this type was last sent."""
        self._fired(type_url)
        snapshot = self._cache.snapshot(self.info.node)
        if snapshot is None:
            return []
        return [self._respond(type_url, snapshot)]

    def _respond(self, t: str, snapshot: Snapshot) -> discovery_pb2.DiscoveryResponse:
        self._cancel(t)
        names = self._names.get(t, frozenset())
        version = snapshot.type_version(t)
        nonce = self._next_nonce()
        self._sent[t] = Sent(version, nonce, names)
        response = discovery_pb2.DiscoveryResponse(
            version_info=version,
            type_url=t,
            nonce=nonce,
            resources=[r.packed for r in snapshot.select(t, names)],
        )
        self._hooks.pushed(self.info, t, version, nonce)
        return response
