"""Bookie liveness in the SQLite backend: heartbeat leases.

A registration is a row of the ``bookies`` table holding an ``expires_at``
wall-clock time and a random ``token`` naming its owner. A daemon heartbeat
thread pushes ``expires_at`` forward every ``lease_seconds / 3``; a killed
process stops renewing, so its row expires and ``bookies()`` ignores it.

If a heartbeat finds its row gone (deleted by hand, or taken over after this
process stalled past its lease), it re-claims the id when free; if another
live owner holds it, the registration is marked ``lost`` and an error logged
(the bookie should re-register or stop).
"""
from __future__ import annotations

import logging
import sqlite3
import threading
import time
import uuid
from typing import Any, Callable, Mapping

from pyspark_ledger.errors import MetadataError
from pyspark_ledger.metadata.names import encode_bookie_info
from pyspark_ledger.metadata.sqlite_db import SqliteDatabase
from pyspark_ledger.metadata.store import Registration
from pyspark_ledger.metadata.workers import TickerThread

log = logging.getLogger(__name__)


def claim_bookie_row(conn: sqlite3.Connection, bookie_id: str, token: str, info: bytes,
                     read_only: bool, lease_seconds: float) -> tuple[str, float] | None:
    """Insert or take over an expired row, inside a write transaction.

    Returns None on success, or ``(token, expires_at)`` of the live holder.
    """
    now = time.time()
    # one statement: insert, or take over a row that is expired or already ours; else nothing changes
    claimed = conn.execute(
        "INSERT INTO bookies (bookie_id, read_only, info, expires_at, token) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (bookie_id) DO UPDATE SET read_only = excluded.read_only, info = excluded.info, "
        "expires_at = excluded.expires_at, token = excluded.token "
        "WHERE bookies.expires_at <= ? OR bookies.token = excluded.token",
        (bookie_id, int(read_only), info, now + lease_seconds, token, now)).rowcount
    if claimed:
        return None
    row = conn.execute("SELECT token, expires_at FROM bookies WHERE bookie_id = ?", (bookie_id,)).fetchone()
    return str(row[0]), float(row[1])


class SqliteRegistration(Registration):
    """A leased row in ``bookies``, renewed by a heartbeat thread until ``close()``."""

    def __init__(self, db: SqliteDatabase, bookie_id: str, info: bytes, read_only: bool,
                 lease_seconds: float, on_close: Callable[["SqliteRegistration"], None]) -> None:
        self.bookie_id = bookie_id
        self.token = uuid.uuid4().hex
        self._db = db
        self._info = info
        self._read_only = read_only
        self._lease_seconds = lease_seconds
        self._on_close = on_close
        self._lock = threading.Lock()
        self._lost = False
        self._closed = False
        self._heartbeat = TickerThread(f"bookie-lease-{bookie_id}", lease_seconds / 3, self._renew)

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def lost(self) -> bool:
        """True once another live process took this bookie id over."""
        return self._lost

    def start_heartbeat(self) -> None:
        self._heartbeat.start()

    def set_read_only(self, read_only: bool) -> None:
        with self._lock:
            self._check_usable()
            if bool(read_only) == self._read_only:
                return  # no write that changes nothing (the heartbeat keeps the row)
            with self._db.write() as conn:
                updated = conn.execute(
                    "UPDATE bookies SET read_only = ?, expires_at = ? WHERE bookie_id = ? AND token = ?",
                    (int(read_only), time.time() + self._lease_seconds, self.bookie_id, self.token),
                ).rowcount
                if not updated:
                    self._reclaim(conn, read_only=bool(read_only))
            self._read_only = bool(read_only)  # once committed: a failed switch is written again when retried
            if self._lost:
                raise MetadataError(self._lost_message())

    def update_info(self, info: Mapping[str, Any]) -> None:
        data = encode_bookie_info(self.bookie_id, info)
        with self._lock:
            self._check_usable()
            if data == self._info:
                return  # no write that changes nothing (the heartbeat keeps the row)
            with self._db.write() as conn:
                updated = conn.execute(
                    "UPDATE bookies SET info = ?, expires_at = ? WHERE bookie_id = ? AND token = ?",
                    (data, time.time() + self._lease_seconds, self.bookie_id, self.token)).rowcount
                if not updated:
                    self._reclaim(conn, info=data)
            self._info = data  # once committed: a failed update is written again when retried
            if self._lost:
                raise MetadataError(self._lost_message())

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._heartbeat.close()
        try:
            if not self._db.closed:
                with self._db.write() as conn:
                    conn.execute("DELETE FROM bookies WHERE bookie_id = ? AND token = ?",
                                 (self.bookie_id, self.token))
        finally:
            self._on_close(self)

    def _renew(self) -> None:
        with self._lock:
            if self._closed or self._lost:
                return
            with self._db.write(synced=False) as conn:  # a renewal need not survive a power cut
                updated = conn.execute(
                    "UPDATE bookies SET expires_at = ? WHERE bookie_id = ? AND token = ?",
                    (time.time() + self._lease_seconds, self.bookie_id, self.token)).rowcount
                if not updated:
                    self._reclaim(conn)

    def _reclaim(self, conn: sqlite3.Connection, *, info: bytes | None = None,
                 read_only: bool | None = None) -> None:
        """Re-create the row (with ``info``/``read_only`` if being changed) unless another live owner holds it."""
        holder = claim_bookie_row(conn, self.bookie_id, self.token, self._info if info is None else info,
                                  self._read_only if read_only is None else read_only, self._lease_seconds)
        if holder is None:
            log.warning("registration of bookie %s had vanished from %s; re-created it",
                        self.bookie_id, self._db.uri)
            return
        self._lost = True
        log.error("%s", self._lost_message())

    def _check_usable(self) -> None:
        if self._closed:
            raise MetadataError(f"registration of bookie {self.bookie_id!r} is closed")
        if self._lost:
            raise MetadataError(self._lost_message())

    def _lost_message(self) -> str:
        return (f"registration of bookie {self.bookie_id!r} in {self._db.uri} was lost: another "
                "live process holds this bookie id now; stop this bookie or register again")
