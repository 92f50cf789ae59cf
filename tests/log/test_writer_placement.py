"""Opening a ``LogWriter`` checks, before it fences or creates anything, that the stream's ledgers can be placed.

- a stream replicated on more bookies than are live and writable fails the
  open with one line naming ``ensemble_size`` and how many bookies are live;
  no ledger is created and the log's current writer is not fenced (a writer
  that could not write must not depose one that can);
- a stream record whose replication breaks E >= Qw >= Qa >= 1 (changed by hand)
  fails the open naming the three settings.

Real bookie processes: the shared three-bookie cluster of ``tests/log``, and a
cluster of this module where one bookie is stopped and started again.
"""
from __future__ import annotations

import dataclasses

import pytest

from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.errors import InvalidConfigurationError, NotEnoughBookiesError
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.log.stream_client import StreamClient
from pyspark_ledger.log.stream_store import update_stream
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.metadata.model import OPEN
from pyspark_ledger.testing.bookies import BookieCluster
from tests.log.conftest import CONFIG, PASSWORD, wait_until


def ledger_ids(streams) -> set[int]:
    return set(streams.client.list_ledgers())


def test_a_stream_wider_than_the_live_bookies_fails_the_open_in_one_line(streams, stream_name, metadata_uri):
    streams.create_stream(stream_name, 1, ensemble_size=4, write_quorum=3, ack_quorum=2)
    before = ledger_ids(streams)
    with pytest.raises(NotEnoughBookiesError) as caught:
        streams.open_writer(stream_name, 0)
    message = str(caught.value)
    assert message == (
        f"stream {stream_name!r} is replicated on ensemble_size=4 bookies (fixed when it was created by "
        f"create_stream), but {metadata_uri} has only 3 writable bookie(s) (3 live); start 1 more bookie(s) or "
        "make read-only ones writable. Nothing was written")
    assert ledger_ids(streams) == before, "a ledger was created"


@pytest.mark.parametrize("bad", [Replication(2, 3, 2), Replication(3, 3, 0), Replication("3", 3, 2)])
def test_a_record_with_broken_quorums_fails_the_open_naming_the_settings(streams, stream_name, bad):
    streams.create_stream(stream_name, 1)
    update_stream(streams.context.store, stream_name, lambda record: dataclasses.replace(record, replication=bad))
    before = ledger_ids(streams)
    with pytest.raises(InvalidConfigurationError) as caught:
        streams.open_writer(stream_name, 0)
    message = str(caught.value)
    assert (f"stream {stream_name!r} records ensemble_size={bad.ensemble_size!r}, write_quorum={bad.write_quorum!r}"
            f", ack_quorum={bad.ack_quorum!r}, which breaks ensemble_size >= write_quorum >= ack_quorum >= 1") \
        in message and "\n" not in message, message
    assert ledger_ids(streams) == before, "a ledger was created"


def test_a_writer_that_cannot_write_does_not_fence_the_current_one(tmp_path):
    uri = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2&poll_interval=0.1"
    with BookieCluster(3, tmp_path / "bookies", uri) as cluster, open_metadata_store(uri) as store, \
            LedgerClient(store, CONFIG) as client, StreamClient(store, password=PASSWORD, client=client) as streams:
        wait_until(lambda: len(client.bookies(writable_only=True)) == 3, what="three writable bookies")
        streams.create_stream("events", 1, ensemble_size=3, write_quorum=2, ack_quorum=2)
        current = streams.open_writer("events", 0)
        current.append(b"first")
        cluster[2].stop()
        wait_until(lambda: len(client.bookies(writable_only=True)) == 2, what="the stopped bookie to leave")

        with pytest.raises(NotEnoughBookiesError) as caught:
            streams.open_writer("events", 0)
        assert client.ledger_metadata(current.ledger_id).state == OPEN, "the current writer was fenced"
        assert "ensemble_size=3 bookies" in str(caught.value) and \
            "has only 2 writable bookie(s) (2 live); start 1 more bookie(s)" in str(caught.value), caught.value

        cluster[2].start()
        wait_until(lambda: len(client.bookies(writable_only=True)) == 3, what="the bookie to come back")
        with streams.open_writer("events", 0) as taker:  # with the bookies back, the open works (and fences)
            taker.append(b"second")
        assert client.ledger_metadata(current.ledger_id).state != OPEN
        current.close()
