"""What every ADS stream does, whatever its protocol: move its node to the served snapshot.

A stream knows, per type, what its node subscribed to and which version of each resource the
node holds. When the snapshot changes (or the node asks for something new) it sends one
response and waits for the node's ACK or NACK before the next, in make-before-break order
(Envoy's "eventual consistency considerations" for xDS):

1. clusters, new and changed only: a cluster the node holds stays until nothing names it;
2. listeners;
3. the sidecar data (``sidecar/<listener>``), new and changed only;
4. routes, once every sidecar stream holds the data of the version they carry;
5. then the removals held back in 1 and 3: clusters, ``removal_grace`` after the node took the
   routes that no longer name them (requests matched just before may still be on their way),
   and sidecar data once every Envoy holds the routes that no longer name it.

Envoy holds back its ACK of a cluster update until the new clusters are warm (health checked,
resolved), so a route never reaches Envoy before the cluster it names can take traffic.

Endpoints (EDS) are not a step. They go out whenever the node lacks the current ones, even while
a step awaits its ACK: Envoy holds back its ACK of a new EDS cluster until the cluster's
endpoints have arrived, so making them wait for that ACK would stall the whole push. The
endpoints of a cluster the node still holds (kept until nothing names it) stay with it.

Steps 4 and 5 wait on other streams (a sidecar is a node of its own); that wait is bounded by
``gate_wait``, after which the step goes out and a warning names the nodes that lagged, so one
stuck node never holds every other back.

A node that reconnects holding a config (the control plane restarted, say) is moved to the
served snapshot only once some sidecar holds that snapshot's data, for up to ``resync_wait``
after the control plane started: the sidecars are reconnecting too, each at its own pace, and
routes of a version no sidecar holds would be answered 503 meanwhile, while what the node holds
keeps serving until it moves.

The state-of-the-world and delta streams differ only in how they read requests and write
responses; both are in this base class's terms.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sr_base import log
from sr_control.compiler.protos import CLUSTER, ENDPOINT, LISTENER, PUSH_ORDER, ROUTE, SIDECAR, TYPE_NAMES
from sr_control.compiler.resources import Resource, digest
from sr_control.xds.cache import SnapshotCache
from sr_control.xds.encoded import Encoded
from sr_control.xds.hooks import Hooks, StreamInfo
from sr_control.xds.snapshot import Snapshot

Push = Callable[[], None]  # asks the stream's loop to call on_push()
# later(seconds, call) -> something with cancel(): the server's event loop, or a thread for a
# bare stream.
Later = Callable[[float, Callable[[], None]], Any]
Held = dict[str, str]  # resource name -> version

# Resources that other resources name: new ones go first, stale ones last.
NAMED_BY_OTHERS = frozenset({CLUSTER, SIDECAR})
# Types outside the step order, each with its own response in flight (see the module docstring).
UNORDERED = frozenset({ENDPOINT})
_STEPS = ""  # the lane of the ordered steps; an unordered type is a lane of its own
# Envoy's own types: a node that says it holds one of them on connecting is an Envoy reconnecting.
RESUMED_TYPES = frozenset({CLUSTER, LISTENER, ROUTE})
# How long a route push waits for the sidecars to hold its data, and a sidecar-data removal for
# the Envoys to drop the routes that named it. A sidecar that has not got the data in time waits
# for it on its own (docs/xds/sidecar-versions.md), so this only needs to cover a normal ACK.
GATE_WAIT = 1.0
# How long a cluster no route names any more is kept after the node moved its routes: a request
# matched by an old route just before may still be with the sidecar, which names the old cluster
# (a cluster Envoy no longer has is 503 "no cluster"). The sidecar takes milliseconds.
REMOVAL_GRACE = 2.0
# How long after the control plane starts a node that reconnects holding a config waits for a
# sidecar to hold the new data: longer than a sidecar's longest reconnect backoff (5 s, jittered
# up to 7.5 s: sr_control/extproc/subscription.py), since until one reconnects none can get it.
RESYNC_WAIT = 10.0

_log = log.get_logger("vllm_sr.xds")


@dataclass
class TypeState:
    """One type on one stream: the subscription and what the node holds."""

    wildcard: bool
    names: set[str] = field(default_factory=set)
    held: Held = field(default_factory=dict)
    # The node asked and is owed an answer even when nothing differs (a SotW first request).
    answer_due: bool = False
    # What the node refused since it last accepted this type: not sent again.
    refused: list[Held] = field(default_factory=list)
    nonce: str = ""  # of the last response of this type

    def wants(self, name: str) -> bool:
        return self.wildcard or name in self.names


@dataclass(frozen=True, slots=True)
class Pending:
    type_url: str
    nonce: str
    version: str
    before: Held  # what the node held before this response
    sent: Held  # what it holds once it accepts it


class Stream:
    def __init__(
        self,
        info: StreamInfo,
        cache: SnapshotCache,
        hooks: Hooks,
        push: Push,
        gate_wait: float = GATE_WAIT,
        resync_wait: float = RESYNC_WAIT,
        removal_grace: float = 0.0,  # the server passes REMOVAL_GRACE; a bare stream removes at once
        later: Later | None = None,
    ) -> None:
        self.info = info
        self._cache = cache
        self._hooks = hooks
        self._push = push
        self._gate_wait = gate_wait
        self._resync_wait = resync_wait
        self._removal_grace = removal_grace
        self._routes_moved: float | None = None  # when the node last accepted routes (monotonic)
        # The node held a config when it connected and has not been moved since (see the docstring).
        self._resuming = False
        self._resync_waited = False
        self._nonces = itertools.count(1)
        self._types: dict[str, TypeState] = {}
        self._order: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # (types, in step order)
        self._pending: dict[str, Pending] = {}  # lane -> the response awaiting the node's answer
        # The resources last sent, by type: a SotW response resends every resource the node keeps.
        self._sent: dict[str, dict[str, Resource]] = {}
        self._gate: tuple[tuple[str, str, bool], float] | None = None  # (what waits, deadline)
        self._later = later or _thread_timer
        self._timer: Any = None
        self._opened = False

    # -- what the protocols call

    def on_push(self) -> list[Any]:
        """The snapshot changed, or another stream moved on: send the next step, if any."""
        return self._advance()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._cache.leave(self.info.id)
        if self._opened:
            self._hooks.closed(self.info)

    # -- what the protocols implement

    def _response(self, t: str, version: str, nonce: str, state: TypeState, want: Held, snapshot: Snapshot) -> Any:
        raise NotImplementedError

    # -- shared steps

    def _open(self, req: Any) -> None:
        """On the first request: learn the node (sent once, on the first message) and say so."""
        if self._opened:
            return
        if req.HasField("node"):
            self.info.node.CopyFrom(req.node)
        self._opened = True
        self._cache.join(self.info.node, self.info.id, self._push)
        self._hooks.opened(self.info)

    def _resume(self, t: str, holds: bool) -> None:
        """On a type's first request: whether the node said it holds a config (it reconnected)."""
        if holds and t in RESUMED_TYPES:
            self._resuming = True

    def _answered(self, t: str, nonce: str, error: str | None) -> None:
        """Settle the response ``nonce`` answers, when it is the one awaited."""
        lane = _lane(t)
        p = self._pending.get(lane)
        if p is None or p.nonce != nonce or p.type_url != t:
            return
        del self._pending[lane]
        state = self._types[t]
        if error is None:
            state.refused.clear()
            if t == ROUTE:
                self._routes_moved = time.monotonic()
            self._hooks.acked(self.info, t, p.version)
        else:
            # The node keeps what it had; resending what it just refused would be refused again.
            state.held = dict(p.before)
            state.refused.append(p.sent)
            self._hooks.nacked(self.info, t, p.version, error)

    def _drop_pending(self, t: str) -> None:
        """The node started ``t`` afresh: it will not answer the response it had of that type."""
        p = self._pending.get(_lane(t))
        if p is not None and p.type_url == t:
            del self._pending[_lane(t)]

    def _advance(self) -> list[Any]:
        snapshot = self._cache.snapshot(self.info.node)
        if snapshot is None:
            return []
        out = []
        for t in sorted(UNORDERED & self._types.keys()):
            if t not in self._pending:
                state = self._types[t]
                want = self._want_unordered(t, state, snapshot)
                if (want != state.held or state.answer_due) and want not in state.refused:
                    out.append(self._send(t, want, snapshot))
        if _STEPS in self._pending:
            return out  # one step at a time: the node's answer comes first
        step = self._next_step(snapshot)
        if step is not None:
            t, want = step
            out.append(self._send(t, want, snapshot))
        return out

    def _next_step(self, snapshot: Snapshot) -> tuple[str, Held] | None:
        # Every step in order, done or not: first each type's make step, then its final one.
        plan = []
        for final in (False, True):
            for t in self._ordered():
                state = self._types[t]
                want = self._want(t, state, snapshot, final)
                done = (want == state.held and not state.answer_due) or want in state.refused
                plan.append((t, final, want, done))
        for t, final, want, _done in plan:
            state = self._types[t]
            if final and state.refused and want == state.held:
                # The node refused a version and the snapshot is back to what it holds: it is in
                # step without a push, which nothing else would report (no ACK comes).
                state.refused.clear()
                self._hooks.resumed(self.info, t, snapshot.type_version(t))
        self._cache.report(
            self.info.id,
            made={t: snapshot.version for t, final, _, done in plan if done and not final},
            settled={t: snapshot.version for t, final, _, done in plan if done and final},
            subscribed=self._types.keys(),
        )
        for t, final, want, done in plan:
            if not done:
                return (t, want) if self._resync_open(snapshot) and self._gate_open(t, final, snapshot) else None
        self._gate = None
        return None

    def _ordered(self) -> tuple[str, ...]:
        key = tuple(self._types)
        if key != self._order[0]:  # the node subscribed to another type since
            ordered = [t for t in PUSH_ORDER if t in self._types]
            ordered += sorted(t for t in self._types if t not in PUSH_ORDER and t not in UNORDERED)
            self._order = (key, tuple(ordered))
        return self._order[1]

    def _want(self, t: str, state: TypeState, snapshot: Snapshot, final: bool) -> Held:
        """What the node should hold of ``t``: the snapshot's resources it subscribes to, plus,
        before the final step, those it holds of a type other resources name. Read only."""
        exact = _exact(t, state, snapshot)
        if final or t not in NAMED_BY_OTHERS or all(name in exact for name in state.held):
            return exact
        want = dict(exact)
        for name, version in state.held.items():
            want.setdefault(name, version)
        return want

    def _want_unordered(self, t: str, state: TypeState, snapshot: Snapshot) -> Held:
        """The endpoints the node should hold: the snapshot's, plus those of clusters it still holds."""
        want = {name: r.version for name, r in snapshot.named(t).items() if state.wants(name)}
        clusters = self._types.get(CLUSTER)
        if clusters is not None:
            for name, version in state.held.items():
                if name in clusters.held:
                    want.setdefault(name, version)
        return want

    def _resync_open(self, snapshot: Snapshot) -> bool:
        """Whether a node that reconnected holding a config may be moved: once a sidecar holds the
        snapshot's data, or ``resync_wait`` after the control plane started."""
        if not self._resuming:
            return True
        if not snapshot.resources.named(SIDECAR) or self._cache.holding(
            self.info.node, SIDECAR, snapshot.version, exclude=self.info.id
        ):
            self._resuming = False
            return True
        left = self._cache.started + self._resync_wait - time.monotonic()
        if left <= 0:
            self._resuming = False
            if self._resync_waited:
                _log.warning(
                    "resyncing a node before any sidecar holds the sidecar data",
                    node=self.info.node.id,
                    version=snapshot.version,
                    waited_s=self._resync_wait,
                    hint="no sidecar reconnected since the control plane started",
                )
            return True
        self._resync_waited = True
        self._arm(left)
        self._cache.wait_until(self.info.id, SIDECAR, snapshot.version, settled=False, every=False)
        return False

    def _gate_open(self, t: str, final: bool, snapshot: Snapshot) -> bool:
        """Whether the other streams are where step ``(t, final)`` needs them (or waited long
        enough), and whether clusters may go yet."""
        if t == CLUSTER and final:
            left = 0.0 if self._routes_moved is None else self._routes_moved + self._removal_grace - time.monotonic()
            if left > 0:
                self._arm(left)
                return False
            return True
        if t == ROUTE and not final:
            waited, settled = SIDECAR, False
        elif t == SIDECAR and final:
            waited, settled = ROUTE, True
        else:
            return True
        # A count, not names: every stream asks this on every wake-up while an edit goes out.
        lagging = self._cache.lagging_count(
            self.info.node, waited, snapshot.version, settled=settled, exclude=self.info.id
        )
        key = (snapshot.version, t, final)
        if not lagging:
            self._gate = None
            return True
        now = time.monotonic()
        if self._gate is None or self._gate[0] != key:
            self._gate = (key, now + self._gate_wait)
            self._arm(self._gate_wait)
        if now < self._gate[1]:
            self._cache.wait_until(self.info.id, waited, snapshot.version, settled=settled, every=True)
            return False
        waited_for = "sidecar data" if t == ROUTE else "routes"
        names = self._cache.lagging(self.info.node, waited, snapshot.version, settled=settled, exclude=self.info.id)
        _log.warning(
            f"sending {TYPE_NAMES.get(t, t)} before every node holds the {waited_for}",
            node=self.info.node.id,
            version=snapshot.version,
            lagging=", ".join(sorted(names)),
            waited_s=self._gate_wait,
        )
        return True

    def _arm(self, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._later(seconds, self._push)

    def _encoded(self, kind: type, t: str, body: bytes, serialized: int, nonce: str) -> Encoded:
        """A response of shared ``body``; ``serialized`` bytes were serialized for it just now."""
        if serialized:
            self._hooks.encoded(self.info, t, serialized)
        return Encoded(kind, body, nonce)

    def _send(self, t: str, want: Held, snapshot: Snapshot) -> Any:
        state = self._types[t]
        exact = _exact(t, state, snapshot)
        # The snapshot's own type version when the node gets exactly the snapshot's resources,
        # so a node in sync reports the version /status and `config compile` show.
        version = (
            snapshot.type_version(t)
            if want == exact
            else digest("\n".join(f"{n} {v}" for n, v in sorted(want.items())).encode())
        )
        nonce = str(next(self._nonces))
        response = self._response(t, version, nonce, state, want, snapshot)
        self._pending[_lane(t)] = Pending(t, nonce, version, dict(state.held), want)
        state.held = dict(want)
        state.answer_due = False
        state.nonce = nonce
        self._hooks.pushed(self.info, t, version, nonce)
        return response

    def _resource(self, t: str, name: str, snapshot: Snapshot) -> Resource | None:
        """The resource to send as ``name``: the snapshot's, or the one last sent (a kept cluster)."""
        return snapshot.named(t).get(name) or self._sent.get(t, {}).get(name)

    def _remember(self, t: str, resources: list[Resource]) -> None:
        self._sent[t] = {r.name: r for r in resources}


# What each subscription holds of the last few snapshots: every stream of a group asks the same
# a few times per edit. By snapshot id, with the snapshot kept beside it so that an id reused by
# a later snapshot is never mistaken for it; only a few snapshots, so old configs are let go.
_EXACT: dict[int, tuple[Snapshot, dict[tuple[str, bool, frozenset[str]], Held]]] = {}
_EXACT_SNAPSHOTS = 4


def _exact(t: str, state: TypeState, snapshot: Snapshot) -> Held:
    """The snapshot's resources of ``t`` that ``state`` subscribes to, by version (shared: read only)."""
    entry = _EXACT.get(id(snapshot))
    if entry is None or entry[0] is not snapshot:
        while len(_EXACT) >= _EXACT_SNAPSHOTS:
            del _EXACT[next(iter(_EXACT))]  # the oldest
        entry = _EXACT[id(snapshot)] = (snapshot, {})
    key = (t, state.wildcard, frozenset() if state.wildcard else frozenset(state.names))
    held = entry[1].get(key)
    if held is None:
        held = entry[1][key] = {name: r.version for name, r in snapshot.named(t).items() if state.wants(name)}
    return held


def _thread_timer(seconds: float, call: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(seconds, call)
    timer.daemon = True
    timer.start()
    return timer


def _lane(t: str) -> str:
    return t if t in UNORDERED else _STEPS
