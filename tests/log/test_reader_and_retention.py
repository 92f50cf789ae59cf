"""Reading across ledgers, partition logs for planning, and retention (by position, by age, everything)
against real bookies."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import (DataLossError, InvalidArgumentError, InvalidConfigurationError, LedgerFencedError,
                                   NoSuchLedgerError)
from pyspark_ledger.log.log_transitions import truncate_through
from pyspark_ledger.log.positions import LATEST, LogPosition
from pyspark_ledger.log.stream_store import read_stream, update_stream
from pyspark_ledger.metadata.model import CLOSED
from pyspark_ledger.spark.planning import check_position
from tests.log.conftest import payload


def write_ledgers(streams, stream, sizes, partition=0, start=0):
    """Commit one closed ledger per size (entries payload(start..)); returns their ids."""
    ids, index = [], start
    for batch, size in enumerate(sizes):
        ledger = streams.create_ledger(stream, partition)
        for _ in range(size):
            ledger.append(payload(index))
            index += 1
        ledger.close()
        ids.append(ledger.ledger_id)
        streams.commit_ledgers(stream, f"w{partition}-{start}", batch, {partition: [ledger.ledger_id]})
    return ids


def datas(entries):
    return [entry.data for entry in entries]


def test_reader_crosses_ledgers_from_any_position(streams, stream_name):
    streams.create_stream(stream_name, 1)
    write_ledgers(streams, stream_name, [3, 0, 4])  # an empty ledger in the middle
    everything = streams.open_reader(stream_name, 0).read()
    assert [e.position for e in everything] == [LogPosition(0, i) for i in range(3)] + [
        LogPosition(2, i) for i in range(4)]
    assert datas(everything) == [payload(i) for i in range(7)]
    assert datas(streams.open_reader(stream_name, 0, "0:2").read()) == [payload(i) for i in range(2, 7)]
    assert datas(streams.open_reader(stream_name, 0, {"ledger": 0, "entry": 3}).read()) == [
        payload(i) for i in range(3, 7)]
    limited = streams.open_reader(stream_name, 0, "earliest")
    assert datas(limited.read(max_entries=4)) == [payload(i) for i in range(4)]
    assert limited.position == LogPosition(2, 1)
    assert datas(limited.read()) == [payload(i) for i in range(4, 7)]
    latest = streams.open_reader(stream_name, 0, LATEST)
    assert latest.position == LogPosition(2, 4) and latest.read() == []
    with pytest.raises(DataLossError, match=r"ledger 0 of the log ends at entry 2, before the position 0:5"):
        streams.open_reader(stream_name, 0, "0:5").read()
    with pytest.raises(DataLossError, match="beyond the end of the log"):
        streams.open_reader(stream_name, 0, "7:0")
    with pytest.raises(InvalidArgumentError, match="max_entries must be an integer >= 1"):
        limited.entries(0)
    with pytest.raises(InvalidConfigurationError, match="poll_interval_s"):
        streams.open_reader(stream_name, 0, poll_interval_s=0)


def test_a_reader_of_an_open_ledger_never_fences_and_waits_for_the_close(streams, make_streams, stream_name):
    streams.create_stream(stream_name, 1)
    writer = streams.open_writer(stream_name, 0)
    for index in range(5):
        writer.append(payload(index))
    reader = make_streams().open_reader(stream_name, 0)
    got = datas(reader.read())  # up to the last add confirmed the bookies know (it may trail by one)
    assert got == [payload(i) for i in range(len(got))] and len(got) >= 4
    assert writer.append(payload(5)) == LogPosition(0, 5)  # the reader did not fence the writer
    writer.roll()  # ledger 0 closes at entry 5; the reader may now cross into ledger 1
    writer.append(payload(6))
    writer.close()
    while len(got) < 7:
        assert reader.wait_for_entries(timeout=30), f"stuck at {reader.position}"
        got += datas(reader.read())
    assert got == [payload(i) for i in range(7)]
    assert not reader.wait_for_entries(timeout=0.2) and reader.read() == []
    assert reader.position == LogPosition(2, 0)  # past the closed ledger 1: where the next ledger starts


def test_partition_logs_report_closed_ledgers_and_stop_at_the_first_open_one(streams, stream_name):
    streams.create_stream(stream_name, 2)
    ids = write_ledgers(streams, stream_name, [2, 3])
    writer = streams.open_writer(stream_name, 0)
    for index in range(4):
        writer.append(payload(index))
    logs = streams.partition_logs(stream_name)
    closed = [streams.client.ledger_metadata(i) for i in ids]
    spans = logs[0].spans
    assert [(s.ledger_seq, s.ledger_id, s.last_entry_id) for s in spans[:2]] == [(0, ids[0], 1), (1, ids[1], 2)]
    assert [s.length for s in spans[:2]] == [md.length for md in closed]
    assert spans[2].ledger_seq == 2 and spans[2].ledger_id == writer.ledger_id and spans[2].last_entry_id >= 2
    assert spans[2].length == sum(md.length for md in closed) * (spans[2].last_entry_id + 1) // 5  # estimated
    assert logs[1].spans == () and logs[1].start == LogPosition(0, 0) and logs[1].end == LogPosition(0, 0)
    writer.roll()  # the writer's first ledger closes; a new open one follows
    spans = streams.partition_logs(stream_name)[0].spans
    assert (spans[2].last_entry_id, len(spans)) == (3, 4)
    writer.close()


def test_nothing_after_an_open_ledger_is_readable_before_it_closes(streams, stream_name):
    streams.create_stream(stream_name, 1)
    writer = streams.open_writer(stream_name, 0)  # a writer that died without closing its ledger
    for index in range(3):
        writer.append(payload(index))
    write_ledgers(streams, stream_name, [2], start=10)  # a closed ledger committed after it
    spans = streams.partition_logs(stream_name)[0].spans
    assert [span.ledger_id for span in spans] == [writer.ledger_id]
    reader = streams.open_reader(stream_name, 0)
    got = datas(reader.read())
    assert got == [payload(i) for i in range(len(got))] and reader.position.ledger_seq == 0
    streams.truncate_all(stream_name)  # fences and closes the open ledger
    assert [span.ledger_id for span in streams.partition_logs(stream_name)[0].spans] == []


def test_truncate_before_a_position_and_readers_before_it_get_data_loss(streams, stream_name):
    streams.create_stream(stream_name, 1)
    ids = write_ledgers(streams, stream_name, [3, 3, 3])
    stale = streams.open_reader(stream_name, 0, "0:1")
    result = streams.truncate_before(stream_name, 0, "1:3")  # ledger 1 (entries 0..2) is wholly before 1:3
    assert result.truncated == {0: (ids[0], ids[1])} and result.deleted == {ids[0], ids[1]}
    for ledger_id in ids[:2]:
        with pytest.raises(NoSuchLedgerError):
            streams.client.ledger_metadata(ledger_id)
    with pytest.raises(DataLossError, match=r"partition 0: the log was truncated and now starts at 2:0; the entries "
                                            r"from 0:1 up to 2:0 are gone"):
        stale.read()
    with pytest.raises(DataLossError, match="truncated"):
        streams.open_reader(stream_name, 0, "1:2")
    resumed = streams.open_reader(stream_name, 0, "1:3")  # the end of the newest truncated ledger: nothing lost
    assert datas(resumed.read()) == [payload(i) for i in range(6, 9)]
    assert datas(streams.open_reader(stream_name, 0).read()) == [payload(i) for i in range(6, 9)]
    log = streams.partition_logs(stream_name)[0]
    assert (log.start, log.truncated_end) == (LogPosition(2, 0), LogPosition(1, 3))
    assert check_position(0, LogPosition(1, 3), log, fail_on_data_loss=True) is None
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        check_position(0, LogPosition(0, 1), log, fail_on_data_loss=True)
    assert streams.truncate_before(stream_name, 0, "2:2").truncated == {}  # ledger 2 is still needed
    assert streams.truncate_before(stream_name, 0, "1:0").truncated == {}  # already gone: nothing to do


def test_truncation_stops_at_an_open_ledger(streams, stream_name):
    streams.create_stream(stream_name, 2)
    writer = streams.open_writer(stream_name, 0)
    writer.append(b"a")
    first = writer.ledger_id
    writer.roll()
    writer.append(b"b")
    assert streams.truncate_before(stream_name, 0, "5:0").truncated == {0: (first,)}
    part = read_stream(streams.context.store, stream_name).value.partition(0)
    assert (part.first_seq, part.ledger_ids) == (1, (writer.ledger_id,))  # the open one stays
    writer.close()
    stuck = streams.open_writer(stream_name, 1)  # an open ledger before closed ones blocks truncation
    write_ledgers(streams, stream_name, [1], partition=1)
    assert streams.truncate_before(stream_name, 1, "5:0").truncated == {}
    assert streams.truncate_older_than(stream_name, 0).truncated == {}
    stuck.close()


def test_truncate_older_than_uses_seal_times(make_streams, stream_name):
    now = [1_000_000]
    streams = make_streams(now_ms=lambda: now[0])
    streams.create_stream(stream_name, 2)
    committed = write_ledgers(streams, stream_name, [2, 2])  # sealed when committed, at 1_000_000
    writer = streams.open_writer(stream_name, 1)
    writer.append(b"a")
    writer.roll()  # the writer's first ledger is closed, its seal time not yet known
    now[0] += 30_000
    assert streams.truncate_older_than(stream_name, 60).truncated == {}  # 30 s old: kept; the closed one sealed now
    sealed = read_stream(streams.context.store, stream_name).value.partition(1).ledgers
    assert [ref.sealed_ms for ref in sealed] == [1_030_000, 0]  # the open ledger is not sealed
    now[0] += 30_000
    assert streams.truncate_older_than(stream_name, 60).truncated == {0: tuple(committed)}
    now[0] += 30_000
    result = streams.truncate_older_than(stream_name, 60, partitions=[1])
    assert list(result.truncated) == [1] and len(result.truncated[1]) == 1
    assert datas(streams.open_reader(stream_name, 1).read()) == []
    writer.append(b"b")
    writer.close()
    assert datas(streams.open_reader(stream_name, 1).read()) == [b"b"]


def test_truncate_all_fences_writers_and_the_log_continues_with_new_ledgers(streams, make_streams, stream_name):
    streams.create_stream(stream_name, 2)
    committed = write_ledgers(streams, stream_name, [2], partition=1)
    writer = streams.open_writer(stream_name, 0)
    writer.append(b"a")
    reader = streams.open_reader(stream_name, 1)
    result = make_streams().truncate_all(stream_name)
    assert result.truncated == {0: (writer.ledger_id,), 1: tuple(committed)}
    assert result.deleted == {writer.ledger_id, *committed}
    with pytest.raises(LedgerFencedError):
        writer.append(b"b")
    with pytest.raises(DataLossError, match="truncated"):
        reader.read()
    logs = streams.partition_logs(stream_name)
    assert (logs[0].start, logs[0].truncated_end) == (LogPosition(1, 0), LogPosition(0, 1))
    assert (logs[1].start, logs[1].truncated_end) == (LogPosition(1, 0), LogPosition(0, 2))
    fresh = streams.open_writer(stream_name, 0)
    assert fresh.append(b"c") == LogPosition(1, 0)  # sequence numbers are never reused
    fresh.close()
    assert datas(streams.open_reader(stream_name, 0).read()) == [b"c"]
    assert datas(streams.open_reader(stream_name, 0, "0:1").read()) == [b"c"]  # read to the end before: no loss


def test_garbage_left_by_a_crash_is_deleted_by_the_next_retention_call(streams, stream_name):
    streams.create_stream(stream_name, 1)
    ids = write_ledgers(streams, stream_name, [1, 1])
    update_stream(streams.context.store, stream_name, lambda r: truncate_through(r, 0, 0, 0))  # then "crashed"
    assert streams.client.ledger_metadata(ids[0]).state == CLOSED
    assert read_stream(streams.context.store, stream_name).value.garbage == (ids[0],)
    assert streams.collect_garbage(stream_name) == {ids[0]}
    with pytest.raises(NoSuchLedgerError):
        streams.client.ledger_metadata(ids[0])
    assert read_stream(streams.context.store, stream_name).value.garbage == ()
    assert streams.collect_garbage(stream_name) == frozenset()


def test_a_recreated_stream_is_data_loss_for_readers_of_the_old_one(streams, stream_name):
    streams.create_stream(stream_name, 1)
    write_ledgers(streams, stream_name, [2])
    reader = streams.open_reader(stream_name, 0)
    assert len(reader.read()) == 2
    streams.delete_stream(stream_name)
    streams.create_stream(stream_name, 1)
    write_ledgers(streams, stream_name, [3])
    with pytest.raises(DataLossError, match="deleted and created anew"):
        reader.read()
