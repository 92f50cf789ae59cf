"""The embedded metadata store: ``sqlite:///abs/path/metadata.db``.

For one machine: several processes may share the file (see ``sqlite_db``).
Ledgers, versioned keys and bookie leases are rows; ids come from a durable
counter; every read-modify-write runs in one ``BEGIN IMMEDIATE`` transaction,
which is what makes compare-and-set atomic across processes. Versions start
at 0 and grow by one per successful write, as ZooKeeper's ``stat.version``.

Bookie liveness uses heartbeat leases (``?lease_seconds=``, see
``sqlite_registration``); watches are served by a polling thread
(``?poll_interval=``, see ``sqlite_watch``). ``close()`` closes this store's
registrations, joins its threads and closes the file.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterator, Mapping

from pyspark_ledger.errors import (InternalError, MetadataError, MetadataExistsError,
                                   MetadataVersionConflictError, NoSuchKeyError, NoSuchLedgerError)
from pyspark_ledger.metadata import names
from pyspark_ledger.metadata.model import LedgerMetadata
from pyspark_ledger.metadata.sqlite_db import SqliteDatabase
from pyspark_ledger.metadata.sqlite_registration import SqliteRegistration, claim_bookie_row
from pyspark_ledger.metadata.sqlite_watch import SqliteWatchPoller
from pyspark_ledger.metadata.store import (BookieRegistration, MetadataStore, Registration,
                                           Versioned, Watch)
from pyspark_ledger.metadata.uri import SqliteTarget

_LIST_PAGE = 1000
log = logging.getLogger(__name__)


class SqliteMetadataStore(MetadataStore):
    """MetadataStore over one SQLite file shared by the processes of one machine."""

    def __init__(self, target: SqliteTarget, *, create: bool = False) -> None:
        self.uri = target.uri
        self._target = target
        self._db = SqliteDatabase(target.path, target.uri, create=create)
        self._poller = SqliteWatchPoller(self._db, target.poll_interval, self.bookies)
        self._registrations: dict[str, SqliteRegistration] = {}
        self._lock = threading.Lock()

    # --- ledgers ------------------------------------------------------------
    def new_ledger_id(self) -> int:
        with self._db.write() as conn:
            ledger_id = self._db.next_counter(conn, "ledger_id")
        if ledger_id > names.MAX_LEDGER_ID:
            raise MetadataError(f"ledger ids of {self.uri} are exhausted")
        return ledger_id

    def create_ledger(self, metadata: LedgerMetadata) -> int:
        ledger_id = names.check_ledger_id(metadata.ledger_id)
        data = names.encode_ledger(metadata)  # before the write lock is taken
        with self._db.write() as conn:
            inserted = conn.execute(
                "INSERT INTO ledgers (ledger_id, data, version, modified) VALUES (?, ?, 0, ?) "
                "ON CONFLICT (ledger_id) DO NOTHING",
                (ledger_id, data, self._db.next_counter(conn, "modified"))).rowcount
            if not inserted:
                raise MetadataExistsError(f"ledger {ledger_id} already exists in {self.uri}")
        return 0

    def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        names.check_ledger_id(ledger_id)
        with self._db.read() as conn:
            row = conn.execute("SELECT data, version FROM ledgers WHERE ledger_id = ?",
                               (ledger_id,)).fetchone()
        if row is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist in {self.uri}")
        return Versioned(LedgerMetadata.from_json(row[0]), int(row[1]))

    def write_ledger(self, metadata: LedgerMetadata, expected_version: int) -> int:
        ledger_id = names.check_ledger_id(metadata.ledger_id)
        names.check_version(expected_version)
        data = names.encode_ledger(metadata)  # before the write lock is taken
        with self._db.write() as conn:
            # compare and set in one statement; only when it matched no row is the reason looked up
            updated = conn.execute("UPDATE ledgers SET data = ?, version = version + 1, modified = ? "
                                   "WHERE ledger_id = ? AND version = ?",
                                   (data, self._db.next_counter(conn, "modified"), ledger_id,
                                    expected_version)).rowcount
            if not updated:
                self._check_ledger_version(conn, ledger_id, expected_version)
                raise self._matched_nothing(f"ledger {ledger_id}", "compare-and-set", expected_version)
        return expected_version + 1

    def delete_ledger(self, ledger_id: int, expected_version: int | None = None) -> None:
        names.check_ledger_id(ledger_id)
        if expected_version is not None:
            names.check_version(expected_version)
        with self._db.write() as conn:
            deleted = conn.execute("DELETE FROM ledgers WHERE ledger_id = ? AND (? IS NULL OR version = ?)",
                                   (ledger_id, expected_version, expected_version)).rowcount
            if not deleted:
                self._check_ledger_version(conn, ledger_id, expected_version)
                raise self._matched_nothing(f"ledger {ledger_id}", "delete", expected_version)

    def list_ledgers(self) -> Iterator[int]:
        after = -1
        while True:
            with self._db.read() as conn:
                page = [row[0] for row in conn.execute(
                    "SELECT ledger_id FROM ledgers WHERE ledger_id > ? ORDER BY ledger_id LIMIT ?",
                    (after, _LIST_PAGE))]
            yield from page
            if len(page) < _LIST_PAGE:
                return
            after = page[-1]

    def watch_ledger(self, ledger_id: int,
                     callback: Callable[[Versioned[LedgerMetadata] | None], None]) -> Watch:
        names.check_ledger_id(ledger_id)
        return self._poller.watch_ledger(ledger_id, callback)

    def _matched_nothing(self, what: str, statement: str, expected: int | None) -> InternalError:
        """A conditional statement matched no row although the version check just passed (cannot happen inside
        one transaction: a bug, not a conflict)."""
        return InternalError(f"{what} in {self.uri}: its {statement} matched no row although it is at version "
                             f"{expected}")

    def _check_ledger_version(self, conn, ledger_id: int, expected: int | None) -> None:
        row = conn.execute("SELECT version FROM ledgers WHERE ledger_id = ?", (ledger_id,)).fetchone()
        if row is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist in {self.uri}")
        if expected is not None and row[0] != expected:
            raise MetadataVersionConflictError(
                f"ledger {ledger_id} in {self.uri} is at version {row[0]}, not {expected}; "
                "re-read it and retry")

    # --- bookies ------------------------------------------------------------
    def register_bookie(self, bookie_id: str, info: Mapping[str, Any] | None = None,
                        read_only: bool = False) -> Registration:
        names.check_bookie_id(bookie_id)
        lease = self._target.lease_seconds
        data = names.encode_bookie_info(bookie_id, info)
        registration = SqliteRegistration(self._db, bookie_id, data, bool(read_only), lease,
                                          self._forget_registration)
        deadline = time.time() + lease + self._target.poll_interval
        while True:
            with self._db.write() as conn:
                holder = claim_bookie_row(conn, bookie_id, registration.token, data,
                                          bool(read_only), lease)
            if holder is None:
                break
            self._check_holder(bookie_id, holder, deadline)
            time.sleep(min(self._target.poll_interval, max(0.0, holder[1] - time.time()) + 0.01))
        with self._lock:
            self._registrations[registration.token] = registration
        registration.start_heartbeat()
        return registration

    def bookies(self, include_read_only: bool = True) -> dict[str, BookieRegistration]:
        with self._db.read() as conn:
            rows = conn.execute("SELECT bookie_id, read_only, info FROM bookies WHERE expires_at > ? "
                                "ORDER BY bookie_id", (time.time(),)).fetchall()
        found = (names.decode_bookie(row[0], row[2], bool(row[1])) for row in rows)
        return {b.bookie_id: b for b in found if include_read_only or not b.read_only}

    def watch_bookies(self, callback: Callable[[dict[str, BookieRegistration]], None]) -> Watch:
        return self._poller.watch_bookies(callback)

    def _check_holder(self, bookie_id: str, holder: tuple[str, float], deadline: float) -> None:
        token, expires_at = holder
        with self._lock:
            own = token in self._registrations
        if own:
            raise MetadataExistsError(f"bookie {bookie_id!r} is already registered in {self.uri} "
                                      "by this same store; close that registration first")
        if expires_at > deadline or time.time() >= deadline:
            raise MetadataExistsError(
                f"bookie {bookie_id!r} is already registered in {self.uri} and its lease runs "
                f"until {time.strftime('%H:%M:%S', time.localtime(expires_at))} (renewed by a live "
                "bookie, or left by a dead one with a longer lease); stop that bookie, wait, or "
                "use another bookie id")

    def _forget_registration(self, registration: SqliteRegistration) -> None:
        with self._lock:
            self._registrations.pop(registration.token, None)

    # --- versioned keys -----------------------------------------------------
    def get(self, key: str) -> Versioned[bytes]:
        names.check_key(key)
        with self._db.read() as conn:
            row = conn.execute("SELECT value, version FROM kv WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise NoSuchKeyError(f"metadata key {key!r} does not exist in {self.uri}")
        return Versioned(bytes(row[0]), int(row[1]))

    def create(self, key: str, value: bytes) -> int:
        names.check_key(key)
        value = names.check_value(value, key)
        with self._db.write() as conn:
            for parent in names.parent_keys(key):
                conn.execute("INSERT OR IGNORE INTO kv (key, parent, value, version) VALUES (?, ?, ?, 0)",
                             (parent, _parent_of(parent), b""))
            if conn.execute("SELECT 1 FROM kv WHERE key = ?", (key,)).fetchone():
                raise MetadataExistsError(f"metadata key {key!r} already exists in {self.uri}")
            conn.execute("INSERT INTO kv (key, parent, value, version) VALUES (?, ?, ?, 0)",
                         (key, _parent_of(key), value))
        return 0

    def set(self, key: str, value: bytes, expected_version: int) -> int:
        names.check_key(key)
        value = names.check_value(value, key)
        names.check_version(expected_version)
        with self._db.write() as conn:
            # compare and set in one statement; only when it matched no row is the reason looked up
            updated = conn.execute("UPDATE kv SET value = ?, version = version + 1 WHERE key = ? AND version = ?",
                                   (value, key, expected_version)).rowcount
            if not updated:
                self._check_key_version(conn, key, expected_version)
                raise self._matched_nothing(f"metadata key {key!r}", "compare-and-set", expected_version)
        return expected_version + 1

    def delete(self, key: str, expected_version: int | None = None) -> None:
        names.check_key(key)
        if expected_version is not None:
            names.check_version(expected_version)
        with self._db.write() as conn:
            self._check_key_version(conn, key, expected_version)
            if conn.execute("SELECT 1 FROM kv WHERE parent = ? LIMIT 1", (key,)).fetchone():
                raise MetadataError(f"metadata key {key!r} in {self.uri} has children; "
                                    "delete them first")
            conn.execute("DELETE FROM kv WHERE key = ?", (key,))

    def children(self, key: str) -> list[str]:
        names.check_key(key, allow_root=True)
        with self._db.read() as conn:
            rows = conn.execute("SELECT key FROM kv WHERE parent = ?", (key,)).fetchall()
        skip = len(key) + 1 if key else 0
        return sorted(row[0][skip:] for row in rows)

    def _check_key_version(self, conn, key: str, expected: int | None) -> None:
        row = conn.execute("SELECT version FROM kv WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise NoSuchKeyError(f"metadata key {key!r} does not exist in {self.uri}")
        if expected is not None and row[0] != expected:
            raise MetadataVersionConflictError(
                f"metadata key {key!r} in {self.uri} is at version {row[0]}, not {expected}; "
                "re-read it and retry")

    # --- lifecycle ----------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            registrations = list(self._registrations.values())
        for registration in registrations:
            try:
                registration.close()
            except MetadataError:
                log.warning("could not remove the registration of bookie %s from %s; its lease "
                            "expires by itself", registration.bookie_id, self.uri, exc_info=True)
        self._poller.close()
        self._db.close()

    def __repr__(self) -> str:
        return f"SqliteMetadataStore({self.uri!r})"


def _parent_of(key: str) -> str:
    return key.rpartition("/")[0]


__all__ = ["SqliteMetadataStore"]
