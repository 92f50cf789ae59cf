"""A client reaches a bookie that came back on another framed add port (docs/protocol.md W11).

The pool learns each bookie's add port from its registration. A bookie that is killed and started again on a
different ``--add-port`` must not be dialed at the old port for long: a stream opened later than
``ADD_PORT_MAX_AGE_S`` after the port was read reads the registration again, and a stream that failed is
replaced by one that reads it again at once. Real bookie processes, real ports.
"""
from __future__ import annotations

import pytest

from pyspark_ledger.client import ClientConfig, LedgerClient, bookie_pool
from pyspark_ledger.client.bookie_pool import BookiePool
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.errors import BookieUnavailableError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.status import BookieStatus
from pyspark_ledger.testing.bookies import BookieProcess, free_port

PASSWORD = b"ports"
KEY = master_key(PASSWORD)


def _add(pool: BookiePool, bookie_id: str, ledger_id: int, entry_id: int):
    body = EntryCodec().encode(ledger_id, entry_id, entry_id - 1, 1, b"x")
    return pool.stream(bookie_id).add(ledger_id, entry_id, KEY, body).result(30)


@pytest.fixture
def moved_bookie(tmp_path):
    """A pool that read bookie B's add port, then B killed and started again on another add port."""
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5"
    process = BookieProcess(tmp_path / "bookie", uri, add_port=free_port())
    store = pool = None
    try:
        process.start()
        store = open_metadata_store(uri)
        pool = BookiePool(store, framed_adds=True)
        assert pool.bookies() == [process.bookie_id]
        old_port = process.add_port
        process.kill()
        process.flags["add_port"] = free_port()
        process.start()
        assert process.add_port != old_port
        with LedgerClient(uri, ClientConfig(framed_adds=False)) as client:  # the ledger the adds go to
            ledger_id = client.create_ledger(1, 1, 1, password=PASSWORD).ledger_id
        yield pool, process, ledger_id
    finally:
        if pool is not None:
            pool.close()
        if store is not None:
            store.close()
        process.kill()


def test_a_port_read_long_ago_is_read_again_before_a_new_stream(moved_bookie, monkeypatch):
    pool, process, ledger_id = moved_bookie
    monkeypatch.setattr(bookie_pool, "ADD_PORT_MAX_AGE_S", 0.0)  # every port read so far is "long ago"
    assert _add(pool, process.bookie_id, ledger_id, 0).status == BookieStatus.OK


def test_a_failed_stream_on_a_fresh_but_moved_port_is_replaced_by_one_on_the_new_port(moved_bookie, monkeypatch):
    pool, process, ledger_id = moved_bookie
    monkeypatch.setattr(bookie_pool, "ADD_PORT_MAX_AGE_S", 3600.0)  # the old port counts as fresh
    with pytest.raises(BookieUnavailableError, match="cannot connect"):
        _add(pool, process.bookie_id, ledger_id, 0)
    stream = pool.stream(process.bookie_id)
    assert stream.closed
    pool.forget_stream(process.bookie_id, stream)
    assert _add(pool, process.bookie_id, ledger_id, 0).status == BookieStatus.OK
