"""A client reaches a bookie that came back on another framed add port (docs/protocol.md W11).

The pool learns each bookie's add port from its registration. A bookie that is killed and started again on a
different ``--add-port`` must not be dialed at the old port for long: a stream opened later than
``ADD_PORT_MAX_AGE_S`` after the port was read reads the registration again; a stream whose port cannot be
reached takes the bookie's gRPC port instead, and the framed port is tried again, read anew, ``FRAMED_RETRY_S``
later. Real bookie processes, real ports.
"""
from __future__ import annotations

import logging
import urllib.request

import pytest

from pyspark_ledger.client import ClientConfig, LedgerClient, bookie_pool, bookie_rpc
from pyspark_ledger.client.bookie_pool import BookiePool
from pyspark_ledger.entry import EntryCodec, master_key
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


def test_a_fresh_but_moved_port_gives_way_to_grpc_and_the_next_stream_finds_the_new_port(moved_bookie,
                                                                                         monkeypatch):
    """The old port refuses the connection before anything was sent: the stream takes the bookie's gRPC port at
    once (the add succeeds, the bookie counts no framed stream); the next stream reads the registration again and
    takes the new framed port."""
    pool, process, ledger_id = moved_bookie
    monkeypatch.setattr(bookie_pool, "ADD_PORT_MAX_AGE_S", 3600.0)  # the old port counts as fresh
    assert _add(pool, process.bookie_id, ledger_id, 0).status == BookieStatus.OK
    assert framed_streams(process) == 0
    stream = pool.stream(process.bookie_id)
    stream.close()
    pool.forget_stream(process.bookie_id, stream)
    assert _add(pool, process.bookie_id, ledger_id, 1).status == BookieStatus.OK
    assert framed_streams(process) == 1


def test_a_framed_port_that_cannot_be_reached_is_left_for_grpc_until_the_retry_time(tmp_path, monkeypatch, caplog):
    """A registration that keeps naming a port the client cannot reach (a firewall, say): every stream still
    works, over gRPC, logged once; the port is dialed again only after ``FRAMED_RETRY_S``."""
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=5"
    dialed: list[int] = []

    class CountedCall(bookie_rpc.FramedCall):
        def __init__(self, host, port, *args, **kwargs):
            dialed.append(port)
            super().__init__(host, port, *args, **kwargs)
    monkeypatch.setattr(bookie_rpc, "FramedCall", CountedCall)
    closed = free_port()  # nothing listens there
    with BookieProcess(tmp_path / "bookie", uri) as process, LedgerClient(uri) as client:
        ledger_id = client.create_ledger(1, 1, 1, password=PASSWORD).ledger_id
        with bookie_rpc.BookieClient(process.bookie_id) as bookie:
            def add(entry_id: int):
                body = EntryCodec().encode(ledger_id, entry_id, entry_id - 1, entry_id + 1, b"x")
                stream = bookie.add_stream(add_port=closed)
                try:
                    return stream.add(ledger_id, entry_id, KEY, body).result(30).status
                finally:
                    stream.close()
            with caplog.at_level(logging.INFO, logger="pyspark_ledger.client.bookie_rpc"):
                assert [add(0), add(1)] == [BookieStatus.OK, BookieStatus.OK]
            assert dialed == [closed]  # the second stream went to gRPC at once
            assert sum("take its gRPC port instead" in record.getMessage() for record in caplog.records) == 1
            monkeypatch.setattr(bookie_rpc, "FRAMED_RETRY_S", 0.0)
            assert add(2) == BookieStatus.OK
            assert dialed == [closed, closed]


def framed_streams(process: BookieProcess) -> float:
    text = urllib.request.urlopen(process.metrics_url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('bookie_framed_add_connections_total{outcome="streamed"}'))
