"""Process settings the compiled resources depend on but the router config does not hold.

Where the control plane, the ext_proc sidecar and Envoy's admin listen are facts of a
deployment (a pod, a laptop), not of the routing: the same router config compiles for both.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

AdsMode = Literal["sotw", "delta"]
# How long a node waits before reopening a lost ADS stream, in seconds: a random wait below
# base * 2**n, never above max (full jitter, as Envoy's own back-off draws it). Capped at 0.5 s:
# Envoy resets its back-off only when a response arrives, which a node resuming in step never
# gets, so after an outage every wait is drawn up to the cap, and a move to another replica
# can take two (the first try may land on the one just lost): with 1 s that was up to 1.5 s,
# with 0.5 s every node is back within about a second. Jittered so a fleet does not reconnect
# in one burst. Envoy's bootstrap and the sidecar share it.
XDS_BACKOFF = (0.1, 0.5)


@dataclass(frozen=True, slots=True)
class Address:
    """``HOST:PORT`` (an IP or a DNS name) or ``unix:PATH``."""

    host: str = ""
    port: int = 0
    path: str = ""  # a Unix socket, when set

    @classmethod
    def parse(cls, text: str) -> Address:
        if text.startswith("unix:"):
            path = text.removeprefix("unix:")
            if not path.startswith("/"):
                raise ValueError(f"{text!r}: a Unix socket needs an absolute path (unix:/run/vsr.sock)")
            return cls(path=path)
        host, sep, port = text.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text!r} is not HOST:PORT (port 1-65535) or unix:PATH")
        return cls(host=host, port=int(port))

    @property
    def is_ip(self) -> bool:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True

    def __str__(self) -> str:
        if self.path:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class XdsTls:
    """The certificate a node presents to the control plane, and the CA it checks the control
    plane's against: file paths where Envoy (or the sidecar) runs, read by it, never by us."""

    cert: str
    key: str
    ca: str


@dataclass(frozen=True, slots=True)
class Settings:
    xds: Address = Address("127.0.0.1", 18000)
    # More control planes on the same config (replicas): Envoy's xDS cluster balances over all,
    # and a stream lost with one reconnects to another (docs/xds/scale.md, Two replicas).
    xds_replicas: tuple[Address, ...] = ()
    xds_tls: XdsTls | None = None  # None: plaintext ADS (a loopback control plane)
    # The ext_proc sidecar runs beside Envoy (same pod), hence loopback by default.
    sidecar: Address = Address("127.0.0.1", 18080)
    admin: Address = Address("127.0.0.1", 9901)
    node_id: str = "vllm-sr-envoy"
    node_cluster: str = "vllm-sr"
    ads: AdsMode = "sotw"
    ca_file: str = "/etc/ssl/certs/ca-certificates.crt"
    max_downstream_connections: int = 50_000

    @property
    def control_planes(self) -> tuple[Address, ...]:
        return (self.xds, *self.xds_replicas)


__all__ = ["XDS_BACKOFF", "AdsMode", "Address", "Settings", "XdsTls"]
