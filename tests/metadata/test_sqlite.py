"""SQLite backend specifics: the file itself, durability, heartbeat leases."""
from __future__ import annotations

import sqlite3
import threading

import pytest

from pyspark_ledger.errors import MetadataError, NoSuchMetadataStoreError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.store import BookieRegistration
from tests.metadata.helpers import ledger, wait_until


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "nested" / "dirs" / "metadata.db"


@pytest.fixture
def sqlite_store(db_path):
    store = open_metadata_store(f"sqlite://{db_path}?lease_seconds=1&poll_interval=0.05", create=True)
    yield store
    store.close()


def _query(path, sql, *args):
    with sqlite3.connect(path) as conn:
        return conn.execute(sql, args).fetchall()


def _execute(path, sql, *args):
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql, args)
        conn.commit()
    finally:
        conn.close()


def test_file_and_parent_directories_are_created_in_wal_mode(sqlite_store, db_path):
    assert db_path.is_file()
    assert _query(db_path, "PRAGMA journal_mode") == [("wal",)]


def test_data_survives_closing_and_reopening(db_path):
    with open_metadata_store(f"sqlite://{db_path}", create=True) as first:
        first_id = first.new_ledger_id()
        first.create_ledger(ledger(first_id))
        first.create("streams/s", b"v")
    with open_metadata_store(f"sqlite://{db_path}") as second:
        assert second.read_ledger(first_id).value == ledger(first_id)
        assert second.get("streams/s").value == b"v"
        assert second.new_ledger_id() > first_id  # the id counter is durable too


def test_heartbeat_renews_the_lease_past_its_first_expiry(sqlite_store, db_path):
    sqlite_store.register_bookie("b1")
    (first_expiry,), = _query(db_path, "SELECT expires_at FROM bookies WHERE bookie_id = 'b1'")
    wait_until(lambda: _query(db_path, "SELECT expires_at FROM bookies")[0][0] > first_expiry + 1.5,
               what="the lease to be renewed beyond 1.5 lease lengths")
    assert "b1" in sqlite_store.bookies()


def test_heartbeat_re_creates_a_row_removed_by_hand(sqlite_store, db_path):
    registration = sqlite_store.register_bookie("b1", {"k": "v"}, read_only=True)
    _execute(db_path, "DELETE FROM bookies")
    wait_until(lambda: "b1" in sqlite_store.bookies(), what="the row to come back")
    assert sqlite_store.bookies()["b1"].info == {"k": "v"}
    assert sqlite_store.bookies()["b1"].read_only is True
    assert not registration.lost


def test_registration_taken_over_by_another_owner_is_lost(sqlite_store, db_path):
    registration = sqlite_store.register_bookie("b1")
    _execute(db_path, "UPDATE bookies SET token = 'intruder', expires_at = expires_at + 3600")
    wait_until(lambda: registration.lost, what="the heartbeat to notice the takeover")
    with pytest.raises(MetadataError, match="lost"):
        registration.set_read_only(True)
    registration.close()
    assert "b1" in sqlite_store.bookies()  # closing must not delete the intruder's row


def test_expired_rows_are_not_listed(sqlite_store, db_path):
    sqlite_store.register_bookie("b1")
    _execute(db_path, "INSERT INTO bookies VALUES ('ghost', 0, '{}', 1.0, 'dead')")
    assert set(sqlite_store.bookies()) == {"b1"}


def test_a_file_that_is_not_a_database_is_reported(tmp_path):
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(MetadataError, match="garbage.db"):
        open_metadata_store(f"sqlite://{path}")


def test_a_directory_in_place_of_the_file_is_reported(tmp_path):
    (tmp_path / "metadata.db").mkdir()
    with pytest.raises(MetadataError, match="metadata.db"):
        open_metadata_store(f"sqlite://{tmp_path}/metadata.db")


def test_a_file_from_a_newer_schema_is_refused(db_path):
    open_metadata_store(f"sqlite://{db_path}", create=True).close()
    _execute(db_path, "PRAGMA user_version = 99")
    with pytest.raises(MetadataError, match="newer"):
        open_metadata_store(f"sqlite://{db_path}")


def test_poll_and_heartbeat_threads_are_joined_on_close(db_path):
    store = open_metadata_store(f"sqlite://{db_path}?poll_interval=0.05", create=True)
    store.watch_bookies(lambda bookies: None)
    store.register_bookie("b1")

    def ours():
        return sorted(t.name for t in threading.enumerate()
                      if t.name in (f"metadata-poll-{db_path}", "bookie-lease-b1"))

    assert ours() == ["bookie-lease-b1", f"metadata-poll-{db_path}"]
    store.close()
    assert ours() == []


def test_opening_a_missing_file_names_the_path_and_creates_nothing(tmp_path):
    path = tmp_path / "no" / "such" / "metadata.db"
    with pytest.raises(NoSuchMetadataStoreError, match=f"no metadata store at {path}"):
        open_metadata_store(f"sqlite://{path}")
    assert list(tmp_path.iterdir()) == []


def test_an_empty_file_is_not_taken_for_a_store_nor_made_into_one(tmp_path):
    path = tmp_path / "metadata.db"
    path.touch()
    with pytest.raises(NoSuchMetadataStoreError, match="not \\(yet\\) a pyspark-ledger metadata store"):
        open_metadata_store(f"sqlite://{path}")
    assert path.stat().st_size == 0 and [p.name for p in tmp_path.iterdir()] == ["metadata.db"]


def test_a_mode_or_info_that_does_not_change_is_not_written(db_path):
    """Only the heartbeat (here every 200 s) writes a registration whose mode and info stay as they are."""
    with open_metadata_store(f"sqlite://{db_path}?lease_seconds=600", create=True) as store:
        registration = store.register_bookie("b1", {"port": 1})
        other = sqlite3.connect(db_path)
        try:
            written = other.execute("PRAGMA data_version").fetchone()[0]  # changes when another connection commits
            registration.set_read_only(False)
            registration.update_info({"port": 1})
            assert other.execute("PRAGMA data_version").fetchone()[0] == written
            registration.set_read_only(True)
            registration.update_info({"port": 2})
            assert other.execute("PRAGMA data_version").fetchone()[0] != written
        finally:
            other.close()
        assert store.bookies()["b1"] == BookieRegistration("b1", True, {"port": 2})


def test_lease_renewals_leave_the_connection_syncing_every_other_commit(sqlite_store, db_path):
    """Renewals commit without syncing the WAL (synchronous=NORMAL); every other commit stays FULL (2)."""
    sqlite_store.register_bookie("b1")
    first = _query(db_path, "SELECT expires_at FROM bookies")[0][0]
    wait_until(lambda: _query(db_path, "SELECT expires_at FROM bookies")[0][0] > first, what="a renewal")
    with sqlite_store._db.read() as conn:  # the store's own connection, between renewals
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
