"""Throwaway certificates: a private CA and the certificates it signs, for sandboxes, demos and tests.

``CertificateAuthority.create()`` makes a CA (an EC P-256 key and a self-signed certificate);
``issue(name, hosts=...)`` signs a certificate whose common name is ``name`` and whose subject alternative
names are ``hosts`` (IP addresses or DNS names) and ``name``. ``write_tls_files(directory, hosts)`` makes a
whole set in one directory (mode 0700): ``ca.pem``, ``bookie.pem``/``bookie-key.pem`` for the servers,
``client.pem``/``client-key.pem`` for clients, every private key mode 0600. For production, use the
certificates of your own CA; nothing here is meant to last (a year by default).
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_DAYS = 365


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pyspark-ledger"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alt_name(value: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(value))
    except ValueError:
        return x509.DNSName(value)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: str | os.PathLike, key_path: str | os.PathLike) -> None:
        Path(cert_path).write_bytes(self.cert_pem)
        write_private(key_path, self.key_pem)


def write_private(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a new or existing file readable by its owner only (mode 0600 from the start)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


class CertificateAuthority:
    """A private CA that signs server and client certificates."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, certificate: x509.Certificate) -> None:
        self._key = key
        self.certificate = certificate

    @classmethod
    def create(cls, common_name: str = "pyspark-ledger throwaway CA", days: int = DEFAULT_DAYS
               ) -> "CertificateAuthority":
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate)

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(self, name: str, hosts: Iterable[str] = (), days: int = DEFAULT_DAYS) -> Issued:
        """A certificate for ``name`` (its common name and a SAN) and ``hosts`` (SANs), good for TLS servers
        and clients alike."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        alt_names = list(dict.fromkeys([*hosts, name]))
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(self.certificate.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([_alt_name(value) for value in alt_names]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                           critical=False)
            .sign(self._key, hashes.SHA256())
        )
        return Issued(certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def write_key(self, path: str | os.PathLike) -> None:
        write_private(path, _key_pem(self._key))


@dataclass(frozen=True)
class TlsFiles:
    """The paths ``write_tls_files`` made."""

    directory: Path
    ca: Path
    bookie_cert: Path
    bookie_key: Path
    client_cert: Path
    client_key: Path


def write_tls_files(directory: str | os.PathLike, hosts: Iterable[str] = ("127.0.0.1", "localhost"),
                    client_name: str = "ledger-admin", bookie_name: str = "bookie") -> TlsFiles:
    """A CA, one certificate for every bookie (valid for ``hosts``) and one client certificate (for mutual
    TLS; its name is ``client_name``), written into ``directory`` (created mode 0700). The CA's key is not
    kept: nothing more can be signed with it."""
    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca = CertificateAuthority.create()
    files = TlsFiles(directory, directory / "ca.pem", directory / "bookie.pem", directory / "bookie-key.pem",
                     directory / "client.pem", directory / "client-key.pem")
    files.ca.write_bytes(ca.cert_pem)
    ca.issue(bookie_name, hosts).write(files.bookie_cert, files.bookie_key)
    ca.issue(client_name).write(files.client_cert, files.client_key)
    return files
