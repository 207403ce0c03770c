"""A state-of-the-world ADS stream, without gRPC: requests and pushes in, responses out.

Rules (Envoy's xDS protocol), on top of the order every stream keeps (``stream.py``):

- A request whose ``response_nonce`` is not the response awaited is stale (it answers an older
  one) and is ignored.
- A request with ``error_detail`` is a NACK: it is reported, and what was refused is not sent
  again until the snapshot moves on.
- The first request of a type says which version the node holds: when that is the version
  served, nothing is sent (a control-plane restart with an unchanged config sends nothing).
- Listeners and clusters are wildcard: every resource. Other types (routes, sidecar data) are
  sent for the names requested, and again when the names change.
- A listener or cluster response carries the whole state of its type; a cluster kept until
  nothing names it is resent with it. A response of a type asked for by name carries only the
  resources the node does not hold yet (new, changed, or newly asked for): the protocol lets a
  state-of-the-world server leave out the unchanged ones of such a type, and Envoy keeps what
  a response leaves out. One route table changed among a thousand is one table sent, not a
  thousand for Envoy to decode and compare.
"""

from __future__ import annotations

from envoy.service.discovery.v3 import discovery_pb2

from sr_control.compiler.protos import CLUSTER, LISTENER
from sr_control.xds.encoded import Encoded
from sr_control.xds.snapshot import Snapshot
from sr_control.xds.stream import Held, Stream, TypeState

# Types whose empty resource list means "everything" (the legacy wildcard of the protocol).
_LEGACY_WILDCARD = frozenset({LISTENER, CLUSTER})
# Types whose every response is their whole state: a resource left out is removed.
_WHOLE_STATE = frozenset({LISTENER, CLUSTER})


class SotwStream(Stream):
    def on_request(self, req: discovery_pb2.DiscoveryRequest) -> list[Encoded]:
        self._open(req)
        self._hooks.received(self.info, req)
        t = req.type_url
        names = set(req.resource_names)
        wildcard = "*" in names or (not names and t in _LEGACY_WILDCARD)
        names.discard("*")
        state = self._types.get(t)
        if req.response_nonce:
            if state is None or req.response_nonce != state.nonce:
                return []  # stale: a newer response is on its way
            # An ACK or NACK of the response awaited, or, when that was settled, new names
            # (Envoy asks for a new listener's routes under the last nonce of the type).
            self._answered(t, req.response_nonce, req.error_detail.message if req.HasField("error_detail") else None)
            if (wildcard, names) != (state.wildcard, state.names):
                state.wildcard, state.names, state.answer_due = wildcard, names, True
            return self._advance()
        # A first request, or a node starting the type afresh: it says which version it holds.
        self._drop_pending(t)  # the node dropped that response: it will not answer it
        state = self._types[t] = TypeState(wildcard, names, answer_due=True)
        self._resume(t, bool(req.version_info))
        snapshot = self._cache.snapshot(self.info.node)
        if snapshot is not None and req.version_info and req.version_info == snapshot.type_version(t):
            state.held = dict(self._want(t, state, snapshot, final=True))
            state.answer_due = False
            self._hooks.resumed(self.info, t, req.version_info)
        return self._advance()

    def _response(self, t: str, version: str, nonce: str, state: TypeState, want: Held, snapshot: Snapshot) -> Encoded:
        names = sorted(want) if t in _WHOLE_STATE else sorted(n for n in want if state.held.get(n) != want[n])
        resources = [r for r in (self._resource(t, name, snapshot) for name in names) if r is not None]
        self._remember(t, resources)
        body, serialized = self._cache.encoder.sotw(t, version, resources)
        return self._encoded(discovery_pb2.DiscoveryResponse, t, body, serialized, nonce)
