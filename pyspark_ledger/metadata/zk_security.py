"""Credentials and TLS for a ZooKeeper metadata store, as kazoo client options.

Credentials (``user:password``) give the store a ZooKeeper *digest* identity;
every znode the store creates then gets an ACL granting everything to that
identity and nothing to anyone else. They come from, in this order:

- the file named by the URI's ``auth_file=`` parameter (one line
  ``user:password``; refused if group or others may access it), or
- the environment variable ``LEDGER_ZK_AUTH``.

Without either the store authenticates as nobody and creates world-open
znodes (the default, as before). The password is never put in the URI, in an
error message or in a log line.

TLS (``tls=1``) makes kazoo connect with TLS, verify the server's certificate
against ``tls_ca`` (or the system's CAs) and its host name, and present the
client certificate ``tls_cert``/``tls_key`` if given.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from kazoo.security import make_digest_acl

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.private_files import read_checked_file
from pyspark_ledger.metadata.uri import ZooKeeperTarget

AUTH_ENV = "LEDGER_ZK_AUTH"
MAX_CREDENTIALS_BYTES = 4096


@dataclass(frozen=True, slots=True)
class DigestCredentials:
    """A ZooKeeper digest identity; ``source`` says where it came from (for messages)."""

    user: str
    password: str
    source: str

    def __repr__(self) -> str:  # never show the password
        return f"DigestCredentials(user={self.user!r}, source={self.source!r})"


def resolve_credentials(target: ZooKeeperTarget,
                        environ: dict[str, str] | None = None) -> DigestCredentials | None:
    """The store's credentials (auth_file first, then LEDGER_ZK_AUTH), or None."""
    environ = os.environ if environ is None else environ
    if target.auth_file:
        text = _read_private_file(target.auth_file)
        return _parse(text, f"the file {target.auth_file} (auth_file=)")
    text = environ.get(AUTH_ENV, "")
    if not text:
        return None
    return _parse(text, f"the environment variable {AUTH_ENV}")


def kazoo_options(target: ZooKeeperTarget,
                  credentials: DigestCredentials | None) -> dict[str, Any]:
    """Keyword arguments for ``KazooClient``: auth data, default ACL and TLS settings."""
    options: dict[str, Any] = {}
    if credentials is not None:
        options["auth_data"] = [("digest", f"{credentials.user}:{credentials.password}")]
        options["default_acl"] = [make_digest_acl(credentials.user, credentials.password, all=True)]
    if target.tls:
        for name in ("tls_ca", "tls_cert", "tls_key"):
            path = getattr(target, name)
            if path and not os.path.isfile(path):
                raise InvalidConfigurationError(
                    f"{name}={path} in {target.uri} is not a readable file")
        options.update(use_ssl=True, verify_certs=True, check_hostname=True,
                       ca=target.tls_ca or None, certfile=target.tls_cert or None,
                       keyfile=target.tls_key or None)
    return options


def _read_private_file(path: str) -> str:
    data = read_checked_file(path, f"the ZooKeeper credentials file {path} (auth_file=)",
                             limit=MAX_CREDENTIALS_BYTES, error=InvalidConfigurationError, private=True)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidConfigurationError(
            f"the ZooKeeper credentials file {path} (auth_file=) is not UTF-8 text; it should hold one line "
            "user:password") from exc


def _parse(text: str, source: str) -> DigestCredentials:
    line = text.strip()
    user, sep, password = line.partition(":")
    if "\n" in line or not sep or not user or not password:
        raise InvalidConfigurationError(
            f"ZooKeeper credentials in {source} must be one line user:password "
            "(a non-empty user without ':' and a non-empty password)")
    return DigestCredentials(user=user, password=password, source=source)
