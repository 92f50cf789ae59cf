"""A ledger deleted under a stream (its metadata gone while the log still lists it): readers fail naming it, or
skip its range with a warning (fail_on_data_loss=False); repair drops lost ledgers at a log's head; deleting a
stream needs its password. Real bookie processes (tests/log/conftest.py)."""
from __future__ import annotations

import logging

import pytest

from pyspark_ledger.errors import DataLossError, NoSuchLedgerError, UnauthorizedError
from pyspark_ledger.log import StreamClient
from pyspark_ledger.log.stream_refs import ledger_uses
from pyspark_ledger.log.stream_store import read_stream


def three_ledgers(streams, stream_name):
    """A one-partition stream of three closed ledgers of two entries each; their ids, oldest first."""
    streams.create_stream(stream_name, 1)
    ids = []
    for batch in range(3):
        ledger = streams.create_ledger(stream_name, 0)
        ledger.append(b"%d-a" % batch)
        ledger.append(b"%d-b" % batch)
        ledger.close()
        streams.commit_ledgers(stream_name, "job", batch, {0: [ledger.ledger_id]})
        ids.append(ledger.ledger_id)
    return ids


def test_ledger_uses_name_the_stream_partition_and_range(streams, stream_name):
    ids = three_ledgers(streams, stream_name)
    [use] = ledger_uses(streams.context.store, ids[1])
    assert (use.stream, use.partition, use.ledger_seq) == (stream_name, 0, 1)
    assert "positions 1:0 up to 2:0" in use.describe()
    assert ledger_uses(streams.context.store, 10**12) == []


def test_a_lost_ledger_fails_the_reader_naming_it_or_is_skipped_with_a_warning(streams, stream_name, caplog):
    ids = three_ledgers(streams, stream_name)
    streams.client.delete_ledger(ids[1], b"log-layer")  # by hand, under the stream

    with pytest.raises(DataLossError) as failed:
        streams.open_reader(stream_name, 0).read()
    assert f"ledger {ids[1]}" in str(failed.value) and "positions 1:0 up to 2:0" in str(failed.value)
    assert "kept being deleted" not in str(failed.value)

    with caplog.at_level(logging.WARNING, logger="pyspark_ledger.log.log_reader"):
        read = streams.open_reader(stream_name, 0, fail_on_data_loss=False).read()
    assert [entry.data for entry in read] == [b"0-a", b"0-b", b"2-a", b"2-b"]
    [warning] = [r.getMessage() for r in caplog.records if "is lost" in r.getMessage()]
    assert f"stream {stream_name!r} partition 0: ledger {ids[1]}" in warning
    assert "positions 1:0 up to 2:0" in warning and "skipping" in warning

    logs = streams.partition_logs(stream_name)  # read planning: no more "kept being deleted ... 5 attempts"
    assert [(span.ledger_id, span.lost) for span in logs[0].spans] == [(ids[0], False), (ids[1], True),
                                                                      (ids[2], False)]


def test_repair_drops_lost_ledgers_only_at_the_head_of_a_log(streams, stream_name):
    ids = three_ledgers(streams, stream_name)
    streams.client.delete_ledger(ids[1], b"log-layer")
    middle = streams.repair_stream(stream_name)
    assert [(lost.ledger_id, lost.ledger_seq, lost.dropped) for lost in middle.lost] == [(ids[1], 1, False)]
    assert read_stream(streams.context.store, stream_name).value.partition(0).ledger_ids == tuple(ids)

    streams.client.delete_ledger(ids[0], b"log-layer")
    dry = streams.repair_stream(stream_name, dry_run=True)
    assert [(lost.ledger_id, lost.dropped) for lost in dry.lost] == [(ids[0], True), (ids[1], True)]
    assert read_stream(streams.context.store, stream_name).value.partition(0).first_seq == 0  # nothing changed
    done = streams.repair_stream(stream_name)
    assert [(lost.ledger_id, lost.dropped) for lost in done.lost] == [(ids[0], True), (ids[1], True)]
    part = read_stream(streams.context.store, stream_name).value.partition(0)
    assert (part.first_seq, part.ledger_ids) == (2, (ids[2],))
    assert [entry.data for entry in streams.open_reader(stream_name, 0).read()] == [b"2-a", b"2-b"]
    with pytest.raises(DataLossError, match="truncated"):  # a reader checkpointed before the loss is told
        streams.open_reader(stream_name, 0, "1:0").read()


def test_deleting_a_stream_needs_its_password(streams, stream_name):
    ids = three_ledgers(streams, stream_name)
    intruder = StreamClient(streams.context.store, password=b"not-the-one")
    with pytest.raises(UnauthorizedError, match=f"password of stream '{stream_name}'"):
        intruder.delete_stream(stream_name)
    intruder.close()  # its own LedgerClient; the store stays the fixture's
    assert streams.client.ledger_metadata(ids[0]).is_closed and stream_name in streams.list_streams()
    streams.delete_stream(stream_name)
    for ledger_id in ids:
        with pytest.raises(NoSuchLedgerError):
            streams.client.ledger_metadata(ledger_id)
