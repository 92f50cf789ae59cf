"""The SQLite metadata file is readable by its owner only (0600, -wal/-shm too; new directories 0700)."""
from __future__ import annotations

import logging
import os
import stat

import pytest

from pyspark_ledger.metadata import open_metadata_store
from tests.metadata.helpers import ledger


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_umask():
    """Run with umask 0, so the modes checked are the ones the store asks for, not the umask's."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def test_a_new_store_file_its_wal_and_shm_are_0600_in_0700_directories(tmp_path, open_umask):
    path = tmp_path / "new" / "deeper" / "metadata.db"
    store = open_metadata_store(f"sqlite://{path}", create=True)
    try:
        store.create_ledger(ledger(store.new_ledger_id()))
        for name in ("metadata.db", "metadata.db-wal", "metadata.db-shm"):
            assert mode(path.parent / name) == 0o600, name
        assert mode(tmp_path / "new") == 0o700 and mode(path.parent) == 0o700
    finally:
        store.close()


def test_an_existing_directory_is_left_alone(tmp_path, open_umask):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    open_metadata_store(f"sqlite://{shared}/metadata.db", create=True).close()
    assert mode(shared) == 0o755
    assert mode(shared / "metadata.db") == 0o600


def test_an_existing_open_file_is_not_chmoded_but_warned_about(tmp_path, caplog):
    path = tmp_path / "metadata.db"
    open_metadata_store(f"sqlite://{path}", create=True).close()
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="pyspark_ledger.metadata.sqlite_db"):
        store = open_metadata_store(f"sqlite://{path}")
    store.close()
    assert mode(path) == 0o644
    assert str(path) in caplog.text and f"chmod 600 {path}" in caplog.text


def test_a_private_existing_file_opens_without_a_warning(tmp_path, caplog):
    path = tmp_path / "metadata.db"
    open_metadata_store(f"sqlite://{path}", create=True).close()
    with caplog.at_level(logging.WARNING, logger="pyspark_ledger.metadata.sqlite_db"):
        open_metadata_store(f"sqlite://{path}").close()
    assert "chmod" not in caplog.text
