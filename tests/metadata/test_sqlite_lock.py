"""The SQLite file's write lock across real processes: who can block whom, and what a blocked write says.

A process stopped (SIGSTOP) outside a transaction -- even one whose watch thread reads all the time --
never blocks another process's writes (WAL: readers take no write lock). One stopped while it holds the
write lock blocks every write of every process until it is continued, but not readers: a store still
opens and reads, and a blocked write fails after the busy timeout naming the lock, the file, the stopped
process and ``kill -CONT``. The busy timeout is lowered to a second here so the test does not wait 15 s.
"""
from __future__ import annotations

import os
import signal
import sqlite3

import pytest

from pyspark_ledger.errors import MetadataError
from pyspark_ledger.metadata import open_metadata_store, sqlite_db, sqlite_lock_holder
from pyspark_ledger.testing.bookies import wait_stopped
from tests.metadata.helpers import ledger, start_child, stop_child

IDLE_AFTER_WRITING = """
import sys
from pyspark_ledger.metadata import open_metadata_store
from tests.metadata.helpers import ledger
store = open_metadata_store(sys.argv[1])
store.create("child", b"1")
store.create_ledger(ledger(900))
store.watch_ledger(900, lambda value: None)   # its poll thread reads every poll_interval
store.watch_bookies(lambda bookies: None)
print("idle", flush=True)
sys.stdin.read()
"""

HOLD_THE_WRITE_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE kv SET value = x'00' WHERE key = 'shared'")
print("holding", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def uri(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_db, "BUSY_TIMEOUT_SECONDS", 1.0)
    uri = f"sqlite://{tmp_path / 'metadata.db'}?lease_seconds=1&poll_interval=0.01"
    with open_metadata_store(uri, create=True) as store:
        store.create("shared", b"before")
        store.create_ledger(ledger(1))
    return uri


def _path(uri: str) -> str:
    return uri.split("?")[0].removeprefix("sqlite://")


def _stopped_child(code: str, argument: str, ready: str):
    """A child running ``code``, SIGSTOPped once it printed ``ready``."""
    child = start_child(code, argument)
    try:
        assert child.stdout.readline().strip() == ready, child.stderr.read()
        os.kill(child.pid, signal.SIGSTOP)
        assert wait_stopped(child.pid), f"child {child.pid} still runs"  # the kill returns before it stops
    except BaseException:
        stop_child(child)
        raise
    return child


def _end(child) -> None:
    os.kill(child.pid, signal.SIGCONT)
    stop_child(child)


def test_a_process_stopped_outside_a_transaction_never_blocks_a_write(uri):
    child = _stopped_child(IDLE_AFTER_WRITING, uri, "idle")
    try:
        with open_metadata_store(uri) as store:  # every write below would fail after 1 s if it were blocked
            for version in range(20):
                store.set("shared", b"%d" % version, version)
                store.write_ledger(ledger(1, last_entry_id=version), version)
            assert store.get("child").value == b"1" and store.read_ledger(900).version == 0
    finally:
        _end(child)


def test_a_stopped_lock_holder_blocks_writes_but_not_opening_nor_reading(uri):
    child = _stopped_child(HOLD_THE_WRITE_LOCK, _path(uri), "holding")
    try:
        with open_metadata_store(uri) as store:  # opening takes no write lock
            assert store.get("shared").value == b"before"  # the holder's uncommitted change is not seen
            assert store.read_ledger(1).version == 0 and list(store.list_ledgers()) == [1]
            with pytest.raises(MetadataError) as failure:
                store.set("shared", b"after", 0)
        message = str(failure.value)
        assert "write lock" in message and _path(uri) in message, message
        assert f"process {child.pid} " in message and "stopped (SIGSTOP)" in message, message
        assert f"kill -CONT {child.pid}" in message, message
    finally:
        _end(child)
    with open_metadata_store(uri) as store:  # once the holder is gone, writes go on
        assert store.set("shared", b"after", 0) == 1


def test_the_lock_holder_is_read_from_proc_locks(tmp_path):
    db = tmp_path / "m.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x)")
    inode = os.stat(f"{db}-shm").st_ino
    locks = tmp_path / "locks"
    locks.write_text(f"1: POSIX  ADVISORY  WRITE 4242 00:2a:{inode + 1} 120 120\n"   # another file
                     f"2: POSIX  ADVISORY  READ  4343 00:2a:{inode} 123 123\n"         # a reader's mark
                     f"2: -> POSIX  ADVISORY  WRITE 4444 00:2a:{inode} 120 120\n"     # a waiter
                     f"3: POSIX  ADVISORY  WRITE 4545 00:2a:{inode} 120 120\n")
    try:
        assert sqlite_lock_holder.write_lock_holder(str(db), str(locks)) == 4545
        locks.write_text(f"1: POSIX  ADVISORY  WRITE 4545 00:2a:{inode} 128 EOF\n")
        assert sqlite_lock_holder.write_lock_holder(str(db), str(locks)) is None
        assert "fuser -v" in sqlite_lock_holder.describe(str(db), str(locks))
    finally:
        conn.close()
