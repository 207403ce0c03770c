"""The sidecar's process settings: where it listens, whom it asks, how long it waits."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Literal

from sr_control.compiler.settings import XdsTls

Forwarding = Literal["auto", "envoy", "sidecar"]


@dataclass(frozen=True, slots=True)
class SidecarSettings:
    # The control plane's ADS port; replicas separated by commas, tried in turn (subscription.py).
    xds: str = "127.0.0.1:18000"
    xds_tls: XdsTls | None = None  # the sidecar's certificate for ADS over mTLS; None: plaintext
    host: str = "127.0.0.1"
    port: int = 18080  # the ext_proc gRPC port Envoy calls
    # A Unix socket to serve ext_proc on instead of host:port, created mode 0600: only this
    # user's processes (Envoy beside it) can connect (docs/extproc/auth.md, who reaches what).
    socket: str = ""
    status_port: int = 18081  # /status, /metrics, /healthz
    # Where the status port listens: "" = host. A Prometheus outside the pod needs it reachable
    # while the gRPC port stays on loopback for Envoy alone.
    status_host: str = ""
    workers: int = 1
    listeners: tuple[str, ...] = ()  # () = every listener
    node_id: str = ""  # "" = vllm-sr-sidecar/<host>/<pid>
    version_wait_ms: int = 1_000  # how long a request waits for a config version not yet received
    card_refresh_s: float = 30.0
    card_timeout_s: float = 2.0
    # Who calls a vllm-sr/5.0 member (docs/extproc/flow.md measures both). envoy: Envoy forwards
    # to the member's cluster, the sidecar calling members itself only to fail over and for
    # systemone/0.2 targets. sidecar: the sidecar makes every upstream call. auto: Envoy
    # forwards to a member whose cluster balances several hosts (a Kubernetes Service's pods,
    # several endpoints); the sidecar calls a member of one host itself.
    forwarding: Forwarding = "auto"
    drain_s: float = 10.0  # on SIGTERM: how long open streams may take to finish
    # Signs a judge's escalation sent back through the listener (extproc/judge.py). Made once,
    # in the process that reads the flags: every worker gets the same (spawn pickles settings).
    escalation_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.socket and self.workers > 1:
            # SO_REUSEPORT spreads TCP connections over workers; one Unix socket has one owner.
            raise ValueError("--socket serves one worker: give --workers 1, or serve N workers on a loopback --port")
        if self.socket and not self.socket.startswith("/"):
            raise ValueError(f"--socket {self.socket!r}: give an absolute path")

    @property
    def listen(self) -> str:
        """Where Envoy reaches the gRPC server, as the compiler's ``--sidecar`` spells it."""
        return f"unix:{self.socket}" if self.socket else f"{self.host}:{self.port}"

    @property
    def status_address(self) -> str:
        return self.status_host or self.host


__all__ = ["Forwarding", "SidecarSettings"]
