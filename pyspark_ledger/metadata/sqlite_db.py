"""The SQLite file behind ``sqlite:///...``: connection, schema, transactions.

One connection per store object, shared by its threads under a lock. Several
processes share the file safely: WAL journal, ``synchronous=FULL`` (a commit
is on disk when it returns; lease renewals excepted, see ``write``), a busy timeout, and ``BEGIN IMMEDIATE`` for every
read-modify-write so compare-and-set checks and writes are atomic across
processes. Every sqlite3/OS error leaves as a ``MetadataError`` naming the URI.

The file has one write lock for all processes: a process stopped (SIGSTOP) or
hung while it holds it stops every metadata change on the host. So it is held
as briefly as possible: only from ``BEGIN IMMEDIATE`` to the end of ``COMMIT``,
with the work that needs no lock done before; opening a file that already has
the schema takes no write lock, and reads never do (WAL), so both go on while a
holder is stopped. A write that waited the busy timeout names the holding
process and what to do (``sqlite_lock_holder``).

Only an opening with ``create=True`` (bookies, the sandbox) creates the file
and its directories; any other opening of a missing or empty file raises
``NoSuchMetadataStoreError`` naming the path and creates nothing.

The file is readable by its owner only: a new one is created mode 0600 before
SQLite opens it (SQLite gives its -wal and -shm files the same mode), in
directories created mode 0700. An existing file is never chmod'ed; if group
or others may read it a warning says which ``chmod`` to run.

A file removed or replaced under a running process (unlinked, renamed
away, overwritten by a new store) would otherwise go on taking writes that
no one else sees. The device and inode of the path are compared with those
of the file opened before every read and before every commit; once they
differ (or the path is gone) every operation raises a ``MetadataError``
saying so. The store's instance id (``instance``) is created in the
transaction that creates the schema.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
import threading
from typing import Iterator
from urllib.parse import quote

from pyspark_ledger.errors import MetadataError, NoSuchMetadataStoreError
from pyspark_ledger.metadata import sqlite_lock_holder
from pyspark_ledger.metadata.instance import INSTANCE_KEY, new_instance_id

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1
FILE_MODE = 0o600
DIRECTORY_MODE = 0o700
BUSY_TIMEOUT_SECONDS = 15.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledgers (
    ledger_id INTEGER PRIMARY KEY,
    data BLOB NOT NULL,
    version INTEGER NOT NULL,
    modified INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    value BLOB NOT NULL,
    version INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS kv_by_parent ON kv (parent, key);
CREATE TABLE IF NOT EXISTS bookies (
    bookie_id TEXT PRIMARY KEY,
    read_only INTEGER NOT NULL,
    info BLOB NOT NULL,
    expires_at REAL NOT NULL,
    token TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


class SqliteDatabase:
    """A locked connection to the metadata file with translated errors."""

    def __init__(self, path: str, uri: str, *, create: bool = False) -> None:
        self.path = path
        self.uri = uri
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        with self._translated("open"):
            if create:
                _make_private_directories(os.path.dirname(path) or "/")
                _create_private_file(path)
            conn = self._connect(create)
            self._identity = _file_identity(os.stat(path))
            try:
                _warn_if_open_to_others(path)
                self._prepare(conn, create)
            except BaseException:
                conn.close()
                raise
            self._conn = conn

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection for single-statement reads."""
        with self._lock, self._translated("read"):
            conn = self._open_connection()
            self.check_file()
            yield conn

    @contextlib.contextmanager
    def write(self, *, synced: bool = True) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error.

        The file's write lock is held from ``BEGIN IMMEDIATE`` to the end of ``COMMIT`` (which
        syncs the WAL): callers prepare everything before (encoding, checks that need no lock)
        and run only their statements inside. The file's identity is checked before the lock
        is taken and again after the commit, before anything is acknowledged: a commit that went
        into a removed file raises instead of returning.

        ``synced=False`` (lease renewals only) commits without syncing the WAL: the commit is
        atomic and seen by every process at once, but a power cut may undo it, which only
        shortens a lease that ended with the machine anyway. The next synced commit syncs it."""
        with self._lock, self._translated("write"):
            conn = self._open_connection()
            self.check_file()
            if not synced:
                conn.execute("PRAGMA synchronous = NORMAL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    _rollback_quietly(conn)
                    raise
                _commit(conn)
            finally:
                if not synced:
                    conn.execute("PRAGMA synchronous = FULL")
            self.check_file()  # a commit into a removed file would be acknowledged and lost

    def check_file(self) -> None:
        """MetadataError if the path no longer names the file this database opened (removed or replaced)."""
        try:
            found = _file_identity(os.stat(self.path))
        except FileNotFoundError:
            found = None
        if found != self._identity:
            how = "removed" if found is None else "replaced by another file"
            raise MetadataError(
                f"metadata store {self.uri}: the file {self.path} was {how} while in use, so nothing written "
                "since is seen by other processes; stop the processes using it, restore the original file "
                "(from where it was moved, or a backup) and restart them; never go on with a new, empty store "
                "(bookies would take their ledgers for deleted)")

    def next_counter(self, conn: sqlite3.Connection, name: str) -> int:
        """Increment counter ``name`` (first value 0) inside a write transaction."""
        row = conn.execute(
            "INSERT INTO counters (name, value) VALUES (?, 0) "
            "ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value", (name,)
        ).fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    @property
    def closed(self) -> bool:
        return self._conn is None

    def _open_connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise MetadataError(f"metadata store {self.uri} is closed")
        return self._conn

    def _connect(self, create: bool) -> sqlite3.Connection:
        """Open the file; without ``create``, SQLite's ``mode=rw`` refuses a missing one (no race)."""
        if create:
            return sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS,
                                   isolation_level=None, check_same_thread=False)
        try:
            return sqlite3.connect(f"file:{quote(self.path)}?mode=rw", uri=True,
                                   timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.OperationalError as exc:
            if os.path.exists(self.path):
                raise
            raise self._missing("the file does not exist") from exc

    def _missing(self, problem: str) -> NoSuchMetadataStoreError:
        return NoSuchMetadataStoreError(
            f"no metadata store at {self.path} ({self.uri}): {problem}; nothing was created. Check "
            "the path (sqlite:/// and an absolute path), or create the store by starting a bookie "
            "(bookie-server --metadata URI) or a sandbox (ledger sandbox)")

    def _prepare(self, conn: sqlite3.Connection, create: bool) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
        if not create and conn.execute("PRAGMA user_version").fetchone()[0] == 0:
            raise self._missing("the file exists but is not (yet) a pyspark-ledger metadata store")
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":  # only a new file needs the switch (which takes the lock)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise MetadataError(f"{self.path} cannot use the WAL journal (got {mode!r}); "
                                "put the metadata file on a local file system")
        conn.execute("PRAGMA synchronous = FULL")
        if self._schema_is_current(conn):
            return  # nothing to create or upgrade: opening takes no write lock (a stopped writer cannot block it)
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._check_schema_version(conn)
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            conn.execute("INSERT OR IGNORE INTO kv (key, parent, value, version) VALUES (?, '', ?, 0)",
                         (INSTANCE_KEY, new_instance_id().encode("ascii")))
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            _rollback_quietly(conn)
            raise
        _commit(conn)

    def _schema_is_current(self, conn: sqlite3.Connection) -> bool:
        """Whether the file already has this schema version and its instance id (read without a lock)."""
        if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            return False
        return conn.execute("SELECT 1 FROM kv WHERE key = ?", (INSTANCE_KEY,)).fetchone() is not None

    def _check_schema_version(self, conn: sqlite3.Connection) -> None:
        found = conn.execute("PRAGMA user_version").fetchone()[0]
        if found > SCHEMA_VERSION:
            raise MetadataError(
                f"{self.path} was written by a newer pyspark-ledger (schema {found}, this one "
                f"reads {SCHEMA_VERSION}); upgrade pyspark-ledger")

    @contextlib.contextmanager
    def _translated(self, action: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise self._unusable(action, exc) from exc
            raise MetadataError(
                f"metadata store {self.uri}: {action} failed: another process held the write lock of "
                f"{self.path} for over {BUSY_TIMEOUT_SECONDS:g} s (the busy timeout); "
                f"{sqlite_lock_holder.describe(self.path)}") from exc
        except sqlite3.Error as exc:
            raise self._unusable(action, exc) from exc
        except OSError as exc:
            raise MetadataError(
                f"metadata store {self.uri}: cannot {action} {self.path}: {exc}") from exc


    def _unusable(self, action: str, exc: sqlite3.Error) -> MetadataError:
        return MetadataError(f"metadata store {self.uri}: {action} failed: {exc} "
                             f"(is {self.path} a pyspark-ledger metadata file on a local disk?)")


def _make_private_directories(directory: str) -> None:
    """Create ``directory`` and its missing parents, each mode 0700 (existing ones are left alone)."""
    parent = os.path.dirname(directory)
    if parent != directory and not os.path.isdir(parent):
        _make_private_directories(parent)
    try:
        os.mkdir(directory, DIRECTORY_MODE)
    except FileExistsError:
        pass


def _create_private_file(path: str) -> None:
    """Create the database file mode 0600 if it is missing."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        pass


def _warn_if_open_to_others(path: str) -> None:
    """Warn (and change nothing) if group or others may read the database file."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        log.warning("the metadata file %s has mode %04o: group or others may read it; run: "
                    "chmod 600 %s (and the same for its -wal and -shm files)", path, mode, path)


def _file_identity(stat_result: os.stat_result) -> tuple[int, int]:
    return stat_result.st_dev, stat_result.st_ino


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")


def _commit(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("COMMIT")
    except sqlite3.Error:
        _rollback_quietly(conn)
        raise
