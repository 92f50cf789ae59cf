"""One-line explanations of a TLS mismatch between this client and a bookie, naming the setting to change.

A bookie's registration says how its port speaks (``"tls"``, ``"mtls"``, or ``""`` for plaintext), so a
client whose settings cannot work with it is told before it dials (``mismatch``): gRPC itself would only
report "Socket closed" or a TLS library error. A handshake that fails although the modes agree (the CA
does not match, the client certificate comes from another CA) is explained by ``handshake_failure``.
Settings are named the way the user gave them (``ClientTls.names``: flags, Spark options, environment).
"""
from __future__ import annotations

from pyspark_ledger.security.tls import ENV_CA, ENV_CERT, ENV_KEY, ClientTls

_FLAGS = ("--tls-ca", "--tls-cert", "--tls-key")
_OPTIONS = ("tlsCa", "tlsCert", "tlsKey")
_ENV = (ENV_CA, ENV_CERT, ENV_KEY)


def setting(tls: ClientTls | None, index: int) -> str:
    """How to name setting ``index`` (0 CA, 1 certificate, 2 key) to a user of ``tls``."""
    names = tls.names if tls is not None else _ENV
    name = names[index]
    if name == _ENV[index]:
        return f"{name} (or {_FLAGS[index]} / the {_OPTIONS[index]} option)"
    if name == _OPTIONS[index]:
        return f"the {name} option"
    if name.startswith("--"):
        return f"{name} (or {_ENV[index]})"
    return f"{name} (or {_ENV[index]})"


def mismatch(bookie_id: str, mode: object, tls: ClientTls | None) -> str | None:
    """Why this client cannot talk to a bookie registered with TLS ``mode``; None if it can (or is unknown)."""
    if mode not in ("", "tls", "mtls"):
        return None  # registered by something that does not say: let the connection tell
    enabled = tls is not None and tls.enabled
    if mode in ("tls", "mtls") and not enabled:
        return (f"bookie {bookie_id} serves TLS only; this client connects in plaintext: set "
                f"{setting(tls, 0)} to the CA that signed its certificate")
    if mode == "mtls" and not tls.mutual:
        return (f"bookie {bookie_id} requires a client certificate (mutual TLS); this client has none: set "
                f"{setting(tls, 1)} and {setting(tls, 2)} to a certificate signed by the bookie's client CA "
                f"and its key")
    if mode == "" and enabled:
        return (f"bookie {bookie_id} serves plaintext only; this client connects with TLS: unset "
                f"{setting(tls, 0)} and {setting(tls, 1)}, or start the bookie with --tls-cert and --tls-key")
    return None


def handshake_failure(bookie_id: str, tls: ClientTls | None, details: str) -> str | None:
    """The explanation of a failed connection of a TLS client, if ``details`` (gRPC's) point at TLS."""
    if tls is None or not tls.enabled:
        return None
    text = " ".join(str(details).split())
    lowered = text.lower()
    check = (f"check {setting(tls, 0)} (the CA that signed the bookie's certificate) and "
             f"{setting(tls, 1)} (a certificate signed by the CA the bookie trusts, its --tls-client-ca)")
    if "handshake" in lowered or "ssl" in lowered or "certificate" in lowered:
        return f"the TLS handshake with bookie {bookie_id} failed: {check} [{text}]"
    if "socket closed" in lowered:
        return (f"bookie {bookie_id} closed the connection: if it is up, the TLS handshake failed "
                f"(it refused this client's certificate): {check} [{text}]")
    return None
