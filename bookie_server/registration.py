"""Announcing the bookie in the metadata store, and taking the announcement back.

The registration is an ephemeral znode (ZooKeeper) or a heartbeat lease
(SQLite): it vanishes when the bookie deregisters on a clean stop, and at
session/lease expiry when the process is killed. Its info tells clients how
to reach the bookie (host, port), where its metrics are and where it stands
(zone and rack, for zone-aware placement); ``space_report``
adds the free and total space of its journal and ledger dirs and keeps it
current (``Registration.update_info``).
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

import pyspark_ledger
from pyspark_ledger.metadata.bookie_location import DEFAULT_LOCATION, Location, location_info
from pyspark_ledger.metadata.store import MetadataStore, Registration

_log = logging.getLogger(__name__)


def bookie_info(host: str, port: int, metrics_port: int | None, metrics_url: str | None,
                data_dir: str, tls=None, location: Location = DEFAULT_LOCATION, add_port: int = 0) -> dict[str, Any]:
    """The info a bookie publishes with its registration; ``location`` is its zone and rack (read back by
    ``metadata.bookie_location.read_location``); ``tls`` (a ServerTls or None) tells clients whether
    the port speaks TLS ("tls") and wants a client certificate ("mtls"), so a client without the matching
    settings can say so in one line instead of failing a handshake; ``add_port`` is the framed add port
    (docs/protocol.md W11), 0 when it is off."""
    return {
        "tls": "mtls" if tls is not None and tls.mutual else "tls" if tls is not None else "",
        "host": host,
        "port": port,
        "metrics_port": metrics_port,
        "add_port": add_port,
        "metrics_url": metrics_url or "",
        "version": pyspark_ledger.__version__,
        "data_dir": data_dir,
        **location_info(location),
    }


def register(store: MetadataStore, bookie_id: str, info: Mapping[str, Any], read_only: bool = False) -> Registration:
    """Register the bookie; waits (bounded, inside the store) for a dead predecessor's entry to expire."""
    registration = store.register_bookie(bookie_id, dict(info), read_only=read_only)
    _log.info("bookie %s registered in %s%s", bookie_id, store.uri, " (read-only)" if read_only else "")
    return registration


def deregister(registration: Registration | None) -> None:
    """Remove the registration; a failure is logged, never raised (the lease expires anyway)."""
    if registration is None:
        return
    try:
        registration.close()
        _log.info("bookie %s deregistered", registration.bookie_id)
    except Exception:  # noqa: BLE001 - shutdown must go on; expiry removes it
        _log.exception("could not deregister bookie %s; its registration expires with the lease/session",
                       getattr(registration, "bookie_id", "?"))
