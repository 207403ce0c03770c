"""ADS over mTLS: the control plane's port, and the credentials each side presents.

Whoever reaches a plaintext ADS port can subscribe and read every listener, deployment and
endpoint. With ``ServerTls`` the port speaks TLS and requires a client certificate signed by
``client_ca``: a node without one, or with one from another CA, fails the handshake, before
any request of it is read. Plaintext is served on loopback only, unless ``insecure`` says that
the network in front of the port is trusted (``check_plaintext``).

    port = bind(server, "0.0.0.0:18000", ServerTls(cert, key, client_ca))  # grpc.server or grpc.aio.server

Files are read when the port is bound (the server's) or when a channel is opened (a node's), so
a renewed certificate is served from the next start, and presented from the next connection.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from sr_control.compiler.settings import XdsTls


class TlsError(ValueError):
    """TLS asked for with files that cannot be used, or plaintext where it is refused."""


@dataclass(frozen=True, slots=True)
class ServerTls:
    """The control plane's certificate and key, and the CA its nodes' certificates must chain to."""

    cert: Path
    key: Path
    client_ca: Path


class _Server(Protocol):
    """What grpc.Server and grpc.aio.Server share for binding a port."""

    def add_insecure_port(self, address: str) -> int: ...

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> int: ...


def _read(path: Path | str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read {what} {path}: {exc.strerror}") from None
    if b"-----BEGIN" not in data:
        raise TlsError(f"{what} {path} is not PEM")
    return data


def server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(_read(tls.key, "--tls-key"), _read(tls.cert, "--tls-cert"))],
        root_certificates=_read(tls.client_ca, "--client-ca"),
        require_client_auth=True,
    )


def channel_credentials(tls: XdsTls) -> grpc.ChannelCredentials:
    """A node's side: its certificate, and the CA the control plane's must chain to."""
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca, "the xDS CA"),
        private_key=_read(tls.key, "the xDS key"),
        certificate_chain=_read(tls.cert, "the xDS certificate"),
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def check_plaintext(host: str, tls: ServerTls | None, insecure: bool) -> None:
    """Refuse plaintext ADS on an address other machines can reach, unless ``insecure``."""
    if tls is None and not insecure and not is_loopback(host):
        raise TlsError(
            f"refusing plaintext ADS on {host}: anyone who reaches it can read every listener, deployment "
            "and endpoint. Give --tls-cert, --tls-key and --client-ca (mTLS), listen on 127.0.0.1, "
            "or pass --insecure where the network in front of it is trusted"
        )


def bind(server: _Server, address: str, tls: ServerTls | None = None) -> int:
    """Bind ``address`` ("host:port") on ``server``, over mTLS when ``tls``; returns the port.

    Raises OSError when the address cannot be bound, TlsError when the files cannot be used."""
    credentials = server_credentials(tls) if tls is not None else None
    try:
        port = (
            server.add_secure_port(address, credentials)
            if credentials is not None
            else server.add_insecure_port(address)
        )
    except RuntimeError:  # grpcio's way of saying that it failed to bind
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {address} (in use, or not an address of this host)")
    return port


__all__ = [
    "ServerTls",
    "TlsError",
    "bind",
    "channel_credentials",
    "check_plaintext",
    "is_loopback",
    "server_credentials",
]
