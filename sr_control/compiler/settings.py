"""Process settings the compiled resources depend on but the router config does not hold.

Where the control plane, the ext_proc sidecar and Envoy's admin listen are facts of a
deployment (a pod, a laptop), not of the routing: the same router config compiles for both.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

AdsMode = Literal["sotw", "delta"]


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
class Settings:
    xds: Address = Address("127.0.0.1", 18000)
    # The ext_proc sidecar runs beside Envoy (same pod), hence loopback by default.
    sidecar: Address = Address("127.0.0.1", 18080)
    admin: Address = Address("127.0.0.1", 9901)
    node_id: str = "vllm-sr-envoy"
    node_cluster: str = "vllm-sr"
    ads: AdsMode = "sotw"
    ca_file: str = "/etc/ssl/certs/ca-certificates.crt"
    max_downstream_connections: int = 50_000


__all__ = ["AdsMode", "Address", "Settings"]
