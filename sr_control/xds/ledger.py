"""Who is connected and where each node stands, per type: what was pushed, ACKed, NACKed.

Fed by stream hooks; read by ``GET /status``. NACKs are logged here with Envoy's own message.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from envoy.config.core.v3 import base_pb2

from sr_base import log
from sr_control.compiler.protos import TYPE_NAMES
from sr_control.xds.hooks import Hooks, StreamInfo

_log = log.get_logger("vllm_sr.xds")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _told(node: base_pb2.Node, key: str) -> str | None:
    """A string the node told about itself under ``vllm_sr`` in its metadata (None when not told)."""
    ours = node.metadata.fields.get("vllm_sr")
    value = ours.struct_value.fields.get(key) if ours is not None else None
    return value.string_value or None if value is not None else None


@dataclass
class _TypeStatus:
    pushed: str | None = None
    acked: str | None = None
    acked_at: str | None = None  # when ``acked`` came (or was found held)
    nack: dict[str, str] | None = None
    nacked_at: datetime | None = None  # when ``nack`` came, to tell whether it refused the version served


@dataclass
class _NodeStatus:
    info: StreamInfo
    types: dict[str, _TypeStatus] = field(default_factory=dict)


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[int, _NodeStatus] = {}

    def hooks(self) -> Hooks:
        return Hooks(
            opened=self._opened,
            closed=self._closed,
            pushed=self._pushed,
            acked=self._acked,
            resumed=self._resumed,
            nacked=self._nacked,
        )

    def refusals(self, since: datetime) -> list[dict[str, str]]:
        """The refusals still standing that came at or after ``since`` (when the version served
        was published): the nodes that refused that version, each with Envoy's own message."""
        with self._lock:
            return [
                {
                    "node": status.info.node.id,
                    "type": TYPE_NAMES.get(t, t),
                    "version": s.nack["version"],
                    "message": s.nack["message"],
                    "at": s.nack["at"],
                }
                for status in self._streams.values()
                for t, s in sorted(status.types.items())
                if s.nack is not None and s.nacked_at is not None and s.nacked_at >= since
            ]

    def nodes(self) -> list[dict[str, Any]]:
        with self._lock:
            out = []
            for status in self._streams.values():
                info = status.info
                out.append(
                    {
                        "id": info.node.id,
                        "cluster": info.node.cluster,
                        "protocol": info.protocol,
                        "peer": info.peer,
                        "connected_at": info.opened_at.isoformat(timespec="milliseconds"),
                        # A sidecar's status port, as its node metadata tells it (vllm-sr status reads it).
                        "status_address": _told(info.node, "status"),
                        "types": {
                            TYPE_NAMES.get(t, t): {"pushed": s.pushed, "acked": s.acked, "nack": s.nack}
                            for t, s in sorted(status.types.items(), key=lambda kv: TYPE_NAMES.get(kv[0], kv[0]))
                        },
                        # Since when the node holds what it ACKed, per type.
                        "acked_at": {TYPE_NAMES.get(t, t): s.acked_at for t, s in sorted(status.types.items())},
                    }
                )
            return out

    def _type(self, info: StreamInfo, type_url: str) -> _TypeStatus:
        node = self._streams.setdefault(info.id, _NodeStatus(info))
        return node.types.setdefault(type_url, _TypeStatus())

    def _opened(self, info: StreamInfo) -> None:
        with self._lock:
            self._streams[info.id] = _NodeStatus(info)
        _log.info(
            "node connected", node=info.node.id, cluster=info.node.cluster, protocol=info.protocol, peer=info.peer
        )

    def _closed(self, info: StreamInfo) -> None:
        with self._lock:
            self._streams.pop(info.id, None)
        _log.info("node disconnected", node=info.node.id, protocol=info.protocol, peer=info.peer)

    def _pushed(self, info: StreamInfo, type_url: str, version: str, nonce: str) -> None:
        with self._lock:
            self._type(info, type_url).pushed = version

    def _acked(self, info: StreamInfo, type_url: str, version: str) -> None:
        with self._lock:
            status = self._type(info, type_url)
            status.acked, status.acked_at = version, _now()
            status.nack = status.nacked_at = None

    def _resumed(self, info: StreamInfo, type_url: str, version: str) -> None:
        # The node holds the version served without a push (it reconnected holding it, or the
        # config went back to what it held after refusing another): nothing is on its way to it.
        with self._lock:
            status = self._type(info, type_url)
            status.pushed = status.acked = version
            status.acked_at = _now()
            status.nack = status.nacked_at = None

    def _nacked(self, info: StreamInfo, type_url: str, version: str, message: str) -> None:
        with self._lock:
            message = message.strip()
            status = self._type(info, type_url)
            status.nacked_at = datetime.now(UTC)
            status.nack = {
                "version": version,
                "message": message,
                "at": status.nacked_at.isoformat(timespec="milliseconds"),
            }
        _log.error(
            "envoy rejected config",
            node=info.node.id,
            type=TYPE_NAMES.get(type_url, type_url),
            version=version,
            envoy_message=message,
        )
