"""The xDS control plane: snapshots, the snapshot cache, ADS streams (SotW and delta), status."""

from sr_control.xds.cache import ALL_NODES, SnapshotCache
from sr_control.xds.hooks import Hooks, StreamInfo
from sr_control.xds.serve import ControlPlane
from sr_control.xds.snapshot import Snapshot

__all__ = ["ALL_NODES", "ControlPlane", "Hooks", "Snapshot", "SnapshotCache", "StreamInfo"]
