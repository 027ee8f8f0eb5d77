"""Certificates for TLS tests, made at run time with the ``cryptography`` package (dev extra).

    pki = make_pki(tmp_path)            # a CA, a server certificate, client certificates
    config = BrokerConfig(ssl_enabled=True, ssl_cert=pki.server.cert, ssl_key=pki.server.key, ...)

Every key is an EC P-256 key (fast to make); every file is PEM.
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

__all__ = ["Authority", "Issued", "Pki", "make_pki"]

HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class Issued:
    """A certificate and its key (PEM files); ``subject`` as RFC 4514 (``CN=..,O=..``)."""

    cert: Path
    key: Path
    subject: str


def _name(common_name: str, organization: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path, password: str | None = None) -> None:
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))


class Authority:
    """A self-signed CA in ``directory`` (``<stem>-ca.pem``) that issues certificates."""

    def __init__(self, directory: Path, stem: str = "test", organization: str = "Petrel Tests") -> None:
        self.directory = directory
        self.organization = organization
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(f"{stem} CA", organization)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.certificate = (
            x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.cert = directory / f"{stem}-ca.pem"
        self.cert.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem: str, common_name: str, *, hosts: tuple[str, ...] = HOSTS, days: int = 30,
              expired: bool = False, key_password: str | None = None) -> Issued:
        """A certificate for server and client use, valid for ``hosts`` (IPs and DNS names);
        ``expired``: its validity ended yesterday."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=days)
        if expired:
            start, end = now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        subject = _name(common_name, self.organization)
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(self.name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        cert, key_path = self.directory / f"{stem}.pem", self.directory / f"{stem}.key"
        cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path, key_password)
        return Issued(cert, key_path, subject.rfc4514_string())


@dataclass(frozen=True)
class Pki:
    ca: Authority
    server: Issued  # for 127.0.0.1 and localhost
    client: Issued  # CN=alice
    other_ca: Authority  # trusted by nobody
    stranger: Issued  # a client certificate from other_ca
    expired: Issued  # a client certificate from ca whose validity has ended
    expired_server: Issued  # a server certificate from ca whose validity has ended


def make_pki(directory: Path) -> Pki:
    """A CA and the certificates TLS tests use, written under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = Authority(directory, "test")
    other = Authority(directory, "other", organization="Somebody Else")
    return Pki(
        ca=ca,
        server=ca.issue("server", "broker"),
        client=ca.issue("client", "alice", hosts=()),
        other_ca=other,
        stranger=other.issue("stranger", "mallory", hosts=()),
        expired=ca.issue("expired", "old-alice", hosts=(), expired=True),
        expired_server=ca.issue("expired-server", "old-broker", expired=True),
    )
