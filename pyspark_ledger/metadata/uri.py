"""Parsing of metadata store URIs into typed, validated targets.

Accepted forms::

    sqlite:///abs/path/metadata.db[?lease_seconds=10&poll_interval=0.5]
    zk://host:port[,host:port...][/chroot][?session_timeout=10]
        [&auth_file=/abs/file][&tls=1&tls_ca=/abs/ca.pem[&tls_cert=...&tls_key=...]]

ZooKeeper credentials are never part of the URI (URIs are printed and logged):
``auth_file`` names a file holding ``user:password`` (see ``zk_security``).
Anything else raises ``InvalidConfigurationError`` naming the URI, what is
wrong with it and the accepted forms.
"""
from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from pyspark_ledger.errors import InvalidConfigurationError

ACCEPTED_FORMS = ("sqlite:///abs/path/metadata.db[?lease_seconds=10&poll_interval=0.5] or "
                  "zk://host:port[,host:port]/chroot[?session_timeout=10][&auth_file=/abs/file]"
                  "[&tls=1&tls_ca=/abs/ca.pem[&tls_cert=/abs/cert.pem&tls_key=/abs/key.pem]]")
DEFAULT_ZOOKEEPER_PORT = 2181
SQLITE_DEFAULTS = {"lease_seconds": 10.0, "poll_interval": 0.5}
ZOOKEEPER_DEFAULTS = {"session_timeout": 10.0}
ZOOKEEPER_FILES = ("auth_file", "tls_ca", "tls_cert", "tls_key")  # absolute paths
ZOOKEEPER_FLAGS = ("tls",)  # 0 or 1


@dataclass(frozen=True, slots=True)
class SqliteTarget:
    """An embedded SQLite metadata file and its liveness/polling settings."""

    uri: str
    path: str
    lease_seconds: float = SQLITE_DEFAULTS["lease_seconds"]
    poll_interval: float = SQLITE_DEFAULTS["poll_interval"]


@dataclass(frozen=True, slots=True)
class ZooKeeperTarget:
    """A ZooKeeper ensemble, the chroot to work under and the session timeout."""

    uri: str
    hosts: tuple[tuple[str, int], ...]
    chroot: str = ""
    session_timeout: float = ZOOKEEPER_DEFAULTS["session_timeout"]
    auth_file: str = ""  # a file holding user:password for digest ACLs ("" = LEDGER_ZK_AUTH or none)
    tls: bool = False
    tls_ca: str = ""  # PEM CA bundle to verify the server ("" = the system's)
    tls_cert: str = ""  # PEM client certificate (with tls_key), for servers that require one
    tls_key: str = ""

    @property
    def connect_string(self) -> str:
        """``host:port,host:port`` without the chroot (kazoo's ``hosts``)."""
        return ",".join(_format_host(host, port) for host, port in self.hosts)


def parse_metadata_uri(uri: str) -> SqliteTarget | ZooKeeperTarget:
    """Parse and validate ``uri``; InvalidConfigurationError if malformed."""
    if not isinstance(uri, str) or not uri.strip():
        raise _bad(uri, "it is empty or not a string")
    try:
        parts = urlsplit(uri.strip())
    except ValueError as exc:
        raise _bad(uri, str(exc)) from exc
    if parts.fragment:
        raise _bad(uri, f"fragments ('#{parts.fragment}') are not allowed")
    if parts.scheme == "sqlite":
        return _parse_sqlite(uri, parts)
    if parts.scheme == "zk":
        return _parse_zookeeper(uri, parts)
    raise _bad(uri, f"unknown scheme {parts.scheme!r}")


def _parse_sqlite(uri: str, parts) -> SqliteTarget:
    if parts.netloc:
        raise _bad(uri, f"the sqlite path must be absolute (three slashes: sqlite:///abs/path), "
                        f"got host part {parts.netloc!r}")
    path = parts.path
    if not path.startswith("/"):
        raise _bad(uri, f"the sqlite path {path!r} is relative; use an absolute path")
    if path.endswith("/"):
        raise _bad(uri, f"the sqlite path {path!r} names a directory; name the database file")
    params = _parse_query(uri, parts.query, SQLITE_DEFAULTS)
    return SqliteTarget(uri=uri, path=posixpath.normpath("/" + path.lstrip("/")), **params)


def _parse_zookeeper(uri: str, parts) -> ZooKeeperTarget:
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        shown = uri.replace(userinfo + "@", "<redacted>@") if ":" in userinfo else uri  # a password
        raise _bad(shown, "user information ('user@') is not supported; give ZooKeeper "
                             "credentials in LEDGER_ZK_AUTH or a file named by auth_file=")
    if not parts.netloc:
        raise _bad(uri, "no ZooKeeper host given")
    hosts = tuple(_parse_host(uri, item) for item in parts.netloc.split(","))
    chroot = _parse_chroot(uri, parts.path)
    params = _parse_query(uri, parts.query, ZOOKEEPER_DEFAULTS, ZOOKEEPER_FILES, ZOOKEEPER_FLAGS)
    _check_tls(uri, params)
    return ZooKeeperTarget(uri=uri, hosts=hosts, chroot=chroot, **params)


def _check_tls(uri: str, params: dict) -> None:
    given = [name for name in ("tls_ca", "tls_cert", "tls_key") if name in params]
    if given and not params.get("tls"):
        raise _bad(uri, f"{', '.join(given)} given without tls=1; add tls=1 to connect over TLS")
    if ("tls_cert" in params) != ("tls_key" in params):
        raise _bad(uri, "tls_cert and tls_key go together (the client certificate and its key)")


def _parse_host(uri: str, item: str) -> tuple[str, int]:
    item = item.strip()
    if item.startswith("["):
        host, sep, rest = item[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise _bad(uri, f"malformed IPv6 host {item!r}; write [addr]:port")
        port_text = rest[1:] if rest else ""
    else:
        host, _, port_text = item.partition(":")
    if not host:
        raise _bad(uri, f"missing host in {item!r}")
    if not port_text:
        return host, DEFAULT_ZOOKEEPER_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _bad(uri, f"bad port {port_text!r} for host {host!r}; use 1..65535")
    return host, int(port_text)


def _parse_chroot(uri: str, path: str) -> str:
    if path in ("", "/"):
        return ""
    if path.endswith("/"):
        raise _bad(uri, f"the chroot {path!r} must not end with '/'")
    for segment in path[1:].split("/"):
        if segment in ("", ".", ".."):
            raise _bad(uri, f"the chroot {path!r} has an empty, '.' or '..' segment")
    if path == "/zookeeper" or path.startswith("/zookeeper/"):
        raise _bad(uri, "the chroot may not be under /zookeeper (reserved by ZooKeeper)")
    return path


def _parse_query(uri: str, query: str, defaults: dict[str, float], files: tuple[str, ...] = (),
                 flags: tuple[str, ...] = ()) -> dict[str, float | str | bool]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise _bad(uri, f"malformed query {query!r}") from exc
    accepted = (*defaults, *files, *flags)
    params: dict[str, float | str | bool] = {}
    for name, text in pairs:
        if name not in accepted:
            raise _bad(uri, f"unknown parameter {name!r}; accepted: {', '.join(sorted(accepted))}")
        if name in params:
            raise _bad(uri, f"parameter {name!r} given twice")
        if name in files:
            params[name] = _absolute_file(uri, name, text)
        elif name in flags:
            params[name] = _flag(uri, name, text)
        else:
            params[name] = _positive_seconds(uri, name, text)
    return params


def _absolute_file(uri: str, name: str, text: str) -> str:
    if not text.startswith("/") or text.endswith("/"):
        raise _bad(uri, f"parameter {name}={text!r} must be the absolute path of a file")
    return posixpath.normpath(text)


def _flag(uri: str, name: str, text: str) -> bool:
    if text not in ("0", "1"):
        raise _bad(uri, f"parameter {name}={text!r} must be 0 or 1")
    return text == "1"


def _positive_seconds(uri: str, name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise _bad(uri, f"parameter {name}={text!r} must be a positive number of seconds")
    return value


def _format_host(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bad(uri: object, problem: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(
        f"invalid metadata store URI {uri!r}: {problem}. Accepted forms: {ACCEPTED_FORMS}"
    )
