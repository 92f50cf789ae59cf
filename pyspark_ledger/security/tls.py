"""TLS for the bookie's ports: the settings of servers and clients, and the gRPC credentials and the ``ssl`` contexts
(for the framed add port, docs/protocol.md W11) made of them.

A bookie serves TLS with ``ServerTls`` (``--tls-cert``, ``--tls-key``); with a client CA
(``--tls-client-ca``) it also requires every caller to show a certificate signed by that CA (mutual TLS),
and the names in that certificate (``peer_names``) are the caller's identity. A client connects with
``ClientTls``: the CA that signed the bookies' certificates, and its own certificate and key for mutual
TLS. The same three settings come from flags, Spark options or the environment (``ClientTls.from_env``).

Every file is checked where it enters, with an error naming the setting: it must exist, be at most
``MAX_PEM_BYTES``, hold PEM of the right kind, and a private key must be readable by its owner only and
belong to the certificate beside it. Plaintext stays the default: no setting, no TLS.
"""
from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Mapping

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.private_files import read_checked_file

MAX_PEM_BYTES = 1024 * 1024
ENV_CA = "LEDGER_TLS_CA"
ENV_CERT = "LEDGER_TLS_CERT"
ENV_KEY = "LEDGER_TLS_KEY"


def read_pem(path: str, setting: str, *, private: bool = False) -> bytes:
    """The bytes of a PEM file given as ``setting``; InvalidConfigurationError naming it if unusable."""
    data = read_checked_file(path, f"{setting} {path!r}", limit=MAX_PEM_BYTES, error=InvalidConfigurationError,
                             private=private)
    if b"-----BEGIN " not in data:
        raise InvalidConfigurationError(f"{setting} {path!r}: not a PEM file (no '-----BEGIN' line)")
    return data


def _certificates(data: bytes, setting: str, path: str) -> list:
    from cryptography import x509

    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise InvalidConfigurationError(f"{setting} {path!r}: holds no readable certificate ({exc})") from exc
    return certificates


def _check_pair(cert_pem: bytes, key_pem: bytes, cert_setting: str, cert_path: str, key_setting: str,
                key_path: str) -> None:
    """The key must be a private key and belong to the (first) certificate."""
    from cryptography.hazmat.primitives import serialization

    certificate = _certificates(cert_pem, cert_setting, cert_path)[0]
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidConfigurationError(f"{key_setting} {key_path!r}: not an unencrypted PEM private key "
                                        f"({exc})") from exc
    raw = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    if key.public_key().public_bytes(encoding, raw) != certificate.public_key().public_bytes(encoding, raw):
        raise InvalidConfigurationError(f"{key_setting} {key_path!r} is not the key of {cert_setting} "
                                        f"{cert_path!r}")


@dataclass(frozen=True)
class ServerTls:
    """A bookie's TLS: its certificate and key, and (for mutual TLS) the CA its callers' certificates need."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None

    @property
    def mutual(self) -> bool:
        return self.client_ca_file is not None

    def server_credentials(self):
        import grpc

        cert = read_pem(self.cert_file, "--tls-cert")
        key = read_pem(self.key_file, "--tls-key", private=True)
        _check_pair(cert, key, "--tls-cert", self.cert_file, "--tls-key", self.key_file)
        client_ca = None
        if self.client_ca_file is not None:
            client_ca = read_pem(self.client_ca_file, "--tls-client-ca")
            _certificates(client_ca, "--tls-client-ca", self.client_ca_file)
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                           require_client_auth=client_ca is not None)

    def ssl_context(self) -> ssl.SSLContext:
        """The same TLS for the framed add port (docs/protocol.md W11): TLS 1.2 or later, this certificate, and
        with a client CA a client certificate it signed required."""
        cert = read_pem(self.cert_file, "--tls-cert")
        key = read_pem(self.key_file, "--tls-key", private=True)
        _check_pair(cert, key, "--tls-cert", self.cert_file, "--tls-key", self.key_file)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            client_ca = read_pem(self.client_ca_file, "--tls-client-ca")
            _certificates(client_ca, "--tls-client-ca", self.client_ca_file)
            context.load_verify_locations(cadata=client_ca.decode("ascii", "replace"))
            context.verify_mode = ssl.CERT_REQUIRED
        return context


@dataclass(frozen=True)
class ClientTls:
    """How a client reaches TLS bookies: the CA to trust, and its own certificate and key for mutual TLS.

    ``names`` says what each field is called where the user set it (flags, Spark options, environment), so
    that errors name the setting the user knows."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    names: tuple[str, str, str] = ("tls_ca", "tls_cert", "tls_key")

    def __post_init__(self) -> None:
        for field_name in ("ca_file", "cert_file", "key_file"):
            value = getattr(self, field_name)
            if value is not None and not isinstance(value, str):
                value = os.fspath(value)
                object.__setattr__(self, field_name, value)
            if value == "":
                object.__setattr__(self, field_name, None)
        if (self.cert_file is None) != (self.key_file is None):
            given, missing = (self.names[1], self.names[2]) if self.cert_file else (self.names[2], self.names[1])
            raise InvalidConfigurationError(f"{given} is set but {missing} is not: a client certificate needs "
                                            "its key (and the key its certificate)")

    @property
    def enabled(self) -> bool:
        return self.ca_file is not None or self.cert_file is not None

    @property
    def mutual(self) -> bool:
        return self.cert_file is not None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ClientTls":
        environ = os.environ if environ is None else environ
        return cls(environ.get(ENV_CA) or None, environ.get(ENV_CERT) or None, environ.get(ENV_KEY) or None,
                   names=(ENV_CA, ENV_CERT, ENV_KEY))

    def channel_credentials(self):
        """gRPC channel credentials (trusting ``ca_file``, or the system's roots if it is not set)."""
        import grpc

        ca_name, cert_name, key_name = self.names
        ca = cert = key = None
        if self.ca_file is not None:
            ca = read_pem(self.ca_file, ca_name)
            _certificates(ca, ca_name, self.ca_file)
        if self.cert_file is not None:
            cert = read_pem(self.cert_file, cert_name)
            key = read_pem(self.key_file, key_name, private=True)
            _check_pair(cert, key, cert_name, self.cert_file, key_name, self.key_file)
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)

    def ssl_context(self) -> ssl.SSLContext:
        """The same settings for a framed add stream (docs/protocol.md W11): the bookie's certificate verified
        against ``ca_file`` (else the system's roots) and its host name, this client's certificate shown."""
        ca_name, cert_name, key_name = self.names
        ca = None
        if self.ca_file is not None:
            ca = read_pem(self.ca_file, ca_name)
            _certificates(ca, ca_name, self.ca_file)
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                             cadata=ca.decode("ascii", "replace") if ca is not None else None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file is not None:
            cert = read_pem(self.cert_file, cert_name)
            key = read_pem(self.key_file, key_name, private=True)
            _check_pair(cert, key, cert_name, self.cert_file, key_name, self.key_file)
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


def peer_names(auth_context: Mapping[str, list[bytes]]) -> frozenset[str]:
    """The names a verified client certificate gives its holder: its common name and its subject alternative
    names, from a gRPC ``context.auth_context()``. Empty without mutual TLS (nothing was verified)."""
    if not auth_context.get("transport_security_type") or auth_context.get("security_level") == [b"TSI_SECURITY_NONE"]:
        return frozenset()
    names = set()
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for value in auth_context.get(key, ()):
            try:
                names.add(value.decode())
            except UnicodeDecodeError:
                continue
    return frozenset(name for name in names if name)
