"""An incremental (delta) ADS stream, without gRPC: requests and pushes in, responses out.

Per type the stream tracks what the node subscribed to (names, or everything) and which
version of each resource the node holds; a response carries only resources whose version
differs and the names that went away, in the order every stream keeps (``stream.py``). On
reconnect Envoy reports what it holds (``initial_resource_versions``), so an unchanged config
sends nothing.

A NACK puts back the versions the node held before the refused response, so the next snapshot
resends everything the node lacks, and the refused state is not sent again (Envoy keeps the
previous version of what it refused: docs/xds/serve.md).
"""

from __future__ import annotations

from envoy.service.discovery.v3 import discovery_pb2

from sr_control.compiler.protos import CLUSTER, LISTENER
from sr_control.xds.encoded import Encoded
from sr_control.xds.snapshot import Snapshot
from sr_control.xds.stream import Held, Stream, TypeState

# Types whose empty first subscription means "everything" (the legacy wildcard of the protocol).
_LEGACY_WILDCARD = frozenset({LISTENER, CLUSTER})


class DeltaStream(Stream):
    def on_request(self, req: discovery_pb2.DeltaDiscoveryRequest) -> list[Encoded]:
        self._open(req)
        self._hooks.received(self.info, req)
        t = req.type_url
        subscribe = set(req.resource_names_subscribe)
        state = self._types.get(t)
        if state is None:
            state = TypeState(wildcard="*" in subscribe or (not subscribe and t in _LEGACY_WILDCARD))
            state.held = dict(req.initial_resource_versions)
            self._types[t] = state
            self._resume(t, bool(req.initial_resource_versions))
        if req.response_nonce:
            self._answered(t, req.response_nonce, req.error_detail.message if req.HasField("error_detail") else None)
        for name in subscribe:
            if name == "*":
                state.wildcard = True
            else:
                state.names.add(name)
        for name in req.resource_names_unsubscribe:
            if name == "*":
                state.wildcard = False
            else:
                state.names.discard(name)
                state.held.pop(name, None)  # the node forgets it: subscribing again sends it afresh
        if req.initial_resource_versions and not req.response_nonce:
            snapshot = self._cache.snapshot(self.info.node)
            if snapshot is not None and state.held == self._want(t, state, snapshot, final=True):
                self._hooks.resumed(self.info, t, snapshot.type_version(t))
        return self._advance()

    def _response(self, t: str, version: str, nonce: str, state: TypeState, want: Held, snapshot: Snapshot) -> Encoded:
        changed = [
            r
            for r in (self._resource(t, n, snapshot) for n in sorted(want) if state.held.get(n) != want[n])
            if r is not None
        ]
        removed = sorted(n for n in state.held if n not in want)
        body, serialized = self._cache.encoder.delta(t, version, changed, removed)
        return self._encoded(discovery_pb2.DeltaDiscoveryResponse, t, body, serialized, nonce)
