"""An incremental (delta) ADS stream, without gRPC: requests and pushes in, responses out.

Per type the stream tracks what the node subscribed to (names, or everything) and which
version of each resource the node holds; a response carries only resources whose version
differs and the names that went away. On reconnect Envoy reports what it holds
(``initial_resource_versions``), so an unchanged config sends nothing.

A NACK puts back the versions the node held before the refused response, so the next snapshot
resends everything the node lacks, and the refused version is not sent again (gotcha 10).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envoy.service.discovery.v3 import discovery_pb2

from sr_control.compiler.protos import CLUSTER, LISTENER
from sr_control.xds.cache import SnapshotCache
from sr_control.xds.hooks import Hooks, StreamInfo
from sr_control.xds.stream import Push, Stream

# Types whose empty first subscription means "everything" (the legacy wildcard of the protocol).
_LEGACY_WILDCARD = frozenset({LISTENER, CLUSTER})


@dataclass
class _TypeState:
    wildcard: bool
    subscribed: set[str] = field(default_factory=set)
    held: dict[str, str] = field(default_factory=dict)  # name -> version the node has
    # nonce -> (type version sent, what the node held of each name before that response)
    pending: dict[str, tuple[str, dict[str, str | None]]] = field(default_factory=dict)
    diffed: str = ""  # the snapshot type version last compared against


class DeltaStream(Stream):
    def __init__(self, info: StreamInfo, cache: SnapshotCache, hooks: Hooks, push: Push) -> None:
        super().__init__(info, cache, hooks, push)
        self._types: dict[str, _TypeState] = {}

    def on_request(self, req: discovery_pb2.DeltaDiscoveryRequest) -> list[discovery_pb2.DeltaDiscoveryResponse]:
        self._open(req)
        t = req.type_url
        state = self._types.get(t)
        subscribe = set(req.resource_names_subscribe)
        if state is None:
            state = _TypeState(wildcard="*" in subscribe or (not subscribe and t in _LEGACY_WILDCARD))
            state.held = dict(req.initial_resource_versions)
            self._types[t] = state
        refused = False
        if req.response_nonce:
            refused = self._answered(t, state, req)
        for name in subscribe:
            if name == "*":
                state.wildcard = True
            else:
                state.subscribed.add(name)
        for name in req.resource_names_unsubscribe:
            if name == "*":
                state.wildcard = False
            else:
                state.subscribed.discard(name)
                state.held.pop(name, None)
        if refused:
            # Resending what was just refused would be refused again; wait for a new snapshot.
            self._watch(t, state.diffed)
            return []
        return self._diff(t, state, reconnect=bool(req.initial_resource_versions) and not req.response_nonce)

    def on_push(self, type_url: str) -> list[discovery_pb2.DeltaDiscoveryResponse]:
        self._fired(type_url)
        state = self._types.get(type_url)
        return self._diff(type_url, state) if state is not None else []

    def _answered(self, t: str, state: _TypeState, req: discovery_pb2.DeltaDiscoveryRequest) -> bool:
        """Settle the response ``req`` answers; True when the node refused it."""
        sent = state.pending.pop(req.response_nonce, None)
        if sent is None:
            return False
        version, before = sent
        if req.HasField("error_detail"):
            for name, held in before.items():
                if held is None:
                    state.held.pop(name, None)
                else:
                    state.held[name] = held
            self._hooks.nacked(self.info, t, version, req.error_detail.message)
            return True
        self._hooks.acked(self.info, t, version)
        return False

    def _diff(self, t: str, state: _TypeState, reconnect: bool = False) -> list[discovery_pb2.DeltaDiscoveryResponse]:
        snapshot = self._cache.snapshot(self.info.node)
        if snapshot is None:
            self._watch(t, "")
            return []
        state.diffed = snapshot.type_version(t)
        available = snapshot.resources.named(t)
        wanted = (set(available) if state.wildcard else set()) | state.subscribed
        changed = [available[n] for n in sorted(wanted) if n in available and state.held.get(n) != available[n].version]
        removed = sorted(n for n in state.held if n not in available or n not in wanted)
        # Delta keeps one watch open per type at all times: a response needs no ACK before the
        # next, since each carries only what changed.
        self._watch(t, state.diffed)
        if not changed and not removed:
            if reconnect:
                self._hooks.resumed(self.info, t, state.diffed)
            return []
        nonce = self._next_nonce()
        state.pending[nonce] = (state.diffed, {n: state.held.get(n) for n in [r.name for r in changed] + removed})
        for r in changed:
            state.held[r.name] = r.version
        for n in removed:
            state.held.pop(n, None)
        self._hooks.pushed(self.info, t, state.diffed, nonce)
        return [
            discovery_pb2.DeltaDiscoveryResponse(
                system_version_info=state.diffed,
                type_url=t,
                nonce=nonce,
                resources=[discovery_pb2.Resource(name=r.name, version=r.version, resource=r.packed) for r in changed],
                removed_resources=removed,
            )
        ]
