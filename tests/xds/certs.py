"""Certificates made in the test (``cryptography``): a CA, and leaf certificates it signs, as PEM files.

ca = Ca.make(directory, "ads-ca")
server = ca.issue("control-plane", ips=["127.0.0.1"])   # Pem(cert=..., key=...)
envoy = ca.issue("envoy")
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Pem:
    cert: Path
    key: Path


def _key_file(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True)
class Ca:
    directory: Path
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def pem(self) -> Path:
        return self.directory / f"{self.name}.crt"

    @classmethod
    def make(cls, directory: Path, name: str) -> Ca:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256())
        )
        ca = cls(directory, name, key, cert)
        ca.pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return ca

    def issue(self, name: str, *, ips: tuple[str, ...] = (), dns: tuple[str, ...] = ()) -> Pem:
        """A certificate for ``name`` (client and server use), with these subject alt names."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alt: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        alt += [x509.DNSName(d) for d in (*dns, name)]
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + _DAY)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        cert_path = self.directory / f"{name}.crt"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return Pem(cert_path, _key_file(key, self.directory / f"{name}.key"))


__all__ = ["Ca", "Pem"]
