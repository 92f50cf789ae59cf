"""The streaming reader's offsets, read limits and plans, driven directly (no SparkSession) on real bookies.

Spark calls these methods in its streaming-source process; calling them here
scripts exact sequences (data appended between calls, truncation, a restart
replaying a batch) that a running query can only hit by chance.
"""
from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("pyarrow")
datasource = pytest.importorskip("pyspark.sql.streaming.datasource")

from pyspark import cloudpickle  # noqa: E402

from pyspark_ledger.errors import DataLossError  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from pyspark_ledger.spark.source import DefaultSource  # noqa: E402
from tests.spark.read_helpers import PASSWORD, append_rows, read_options, three_ledger_stream  # noqa: E402

pytestmark = pytest.mark.spark
ReadAllAvailable, ReadMaxRows, ReadMaxBytes = (datasource.ReadAllAvailable, datasource.ReadMaxRows,
                                               datasource.ReadMaxBytes)


@pytest.fixture
def streams(cluster):
    return executor.stream_client(cluster.metadata_uri, PASSWORD)


@pytest.fixture
def stream(request, streams):
    return three_ledger_stream(request, streams)


def reader_for(cluster, stream, **options):
    source = DefaultSource(read_options(cluster.metadata_uri, stream, **options))
    return source.streamReader(source.schema())


def entries(reader, start: dict, end: dict) -> list[tuple[int, int, int]]:
    """(partition, ledger id, entry id) of every entry ``partitions(start, end)`` plans, in order."""
    return [(part.read_range.partition, part.read_range.ledger_id, entry_id)
            for part in reader.partitions(start, end)
            for entry_id in range(part.read_range.first_entry_id, part.read_range.last_entry_id + 1)]


def drain(reader, limit) -> list[list[tuple[int, int, int]]]:
    """The entries of each micro-batch until the reader reports no new data."""
    batches, start = [], reader.initialOffset()
    for _ in range(100):
        end = reader.latestOffset(start, limit)
        if end == start:
            return batches
        batches.append(entries(reader, start, end))
        start = json.loads(json.dumps(end))  # as Spark hands it back
    pytest.fail("the reader never stopped reporting new data")


def all_entries(reader) -> list[tuple[int, int, int]]:
    start = reader.initialOffset()
    return entries(reader, start, reader.latestOffset(start, ReadAllAvailable()))


# --- read limits -----------------------------------------------------------------------------------------------


def test_default_read_limit_follows_the_options(cluster, stream):
    assert reader_for(cluster, stream).getDefaultReadLimit() == ReadAllAvailable()
    assert reader_for(cluster, stream, maxEntriesPerTrigger=7).getDefaultReadLimit() == ReadMaxRows(7)
    assert reader_for(cluster, stream, maxBytesPerTrigger="2k").getDefaultReadLimit() == ReadMaxBytes(2048)


def test_max_entries_caps_every_micro_batch_and_loses_nothing(cluster, stream):
    reader = reader_for(cluster, stream, maxEntriesPerTrigger=4)
    everything = all_entries(reader)
    batches = drain(reader, reader.getDefaultReadLimit())
    assert [len(batch) for batch in batches] == [4, 4, 1]
    assert sorted(entry for batch in batches for entry in batch) == sorted(everything)
    for partition in (0, 1):  # each partition's entries come in log order across batches
        order = [entry for batch in batches for entry in batch if entry[0] == partition]
        assert order == [entry for entry in everything if entry[0] == partition]


def test_max_bytes_caps_every_micro_batch_by_stored_entry_size(cluster, streams, stream):
    sizes = {ledger_id: streams.client.ledger_metadata(ledger_id).length
             // (streams.client.ledger_metadata(ledger_id).last_entry_id + 1)
             for ledger_id in {ledger for _, ledger, _ in all_entries(reader_for(cluster, stream))}}
    entry_bytes = max(sizes.values())
    assert max(sizes.values()) - min(sizes.values()) <= 16, "entries of the test stream are all about one size"
    limit = entry_bytes * 2 + entry_bytes // 2
    reader = reader_for(cluster, stream, maxBytesPerTrigger=limit)
    batches = drain(reader, reader.getDefaultReadLimit())
    assert sum(len(batch) for batch in batches) == 9
    assert all(1 <= len(batch) and sum(sizes[ledger] for _, ledger, _ in batch) <= limit for batch in batches)
    assert len(batches) >= 5


def test_both_limits_apply_and_read_all_available_overrides_them(cluster, stream):
    reader = reader_for(cluster, stream, maxEntriesPerTrigger=2, maxBytesPerTrigger="1g")
    assert [len(batch) for batch in drain(reader, ReadMaxBytes(10**9))] == [2, 2, 2, 2, 1]
    assert [len(batch) for batch in drain(reader, ReadMaxRows(5))] == [5, 4]
    assert [len(batch) for batch in drain(reader, ReadAllAvailable())] == [9]


# --- offsets --------------------------------------------------------------------------------------------------------


def test_starting_offsets_give_the_initial_offset(cluster, stream):
    assert reader_for(cluster, stream).initialOffset() == {"0": {"ledger": 0, "entry": 0},
                                                          "1": {"ledger": 0, "entry": 0}}
    assert reader_for(cluster, stream, startingOffsets="latest").initialOffset() == {
        "0": {"ledger": 1, "entry": 2}, "1": {"ledger": 0, "entry": 3}}
    assert reader_for(cluster, stream, startingOffsets='{"0": "1:1"}').initialOffset() == {
        "0": {"ledger": 1, "entry": 1}, "1": {"ledger": 0, "entry": 0}}


def test_a_replayed_batch_plans_the_identical_entries(cluster, streams, stream):
    reader = reader_for(cluster, stream, maxEntriesPerTrigger=5)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    planned = entries(reader, start, end)
    append_rows(streams, stream, 0, 30, 3, 5)
    append_rows(streams, stream, 1, 15, 2, 5)
    restarted = reader_for(cluster, stream, maxEntriesPerTrigger=5)  # a new process after a restart
    assert entries(restarted, start, end) == planned


def test_partitions_added_to_the_stream_are_read_from_their_start(cluster, streams, stream):
    reader = reader_for(cluster, stream)
    start = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    streams.add_partitions(stream, 3)
    append_rows(streams, stream, 2, 0, 2, 5)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["2"] == {"ledger": 0, "entry": 2}
    assert [entry[0] for entry in entries(reader, start, end)] == [2, 2]


def test_available_now_stops_at_the_end_pinned_when_it_started(cluster, streams, stream):
    reader = reader_for(cluster, stream, maxEntriesPerTrigger=4)
    reader.prepareForTriggerAvailableNow()
    append_rows(streams, stream, 0, 30, 2, 5)  # added after the query started: not read
    streams.add_partitions(stream, 3)
    append_rows(streams, stream, 2, 0, 1, 5)
    batches = drain(reader, reader.getDefaultReadLimit())
    assert [len(batch) for batch in batches] == [4, 4, 1]
    assert reader_for(cluster, stream).reportLatestOffset()["0"] == {"ledger": 2, "entry": 2}


def test_available_now_reads_its_target_even_when_later_data_dwarfs_it(cluster, streams, stream):
    reader = reader_for(cluster, stream, maxEntriesPerTrigger=1)
    target = all_entries(reader)
    reader.prepareForTriggerAvailableNow()
    append_rows(streams, stream, 1, 15, 40, 1)  # a large backlog after the target must not take the budget
    batches = drain(reader, reader.getDefaultReadLimit())
    assert [len(batch) for batch in batches] == [1] * 9
    assert sorted(entry for batch in batches for entry in batch) == sorted(target)


# --- data loss ---------------------------------------------------------------------------------------------------------


def test_a_truncated_checkpoint_fails_naming_failondataloss(cluster, streams, stream):
    reader = reader_for(cluster, stream)
    checkpointed = {"0": {"ledger": 0, "entry": 2}, "1": {"ledger": 0, "entry": 0}}
    streams.truncate_before(stream, 0, "1:0")
    with pytest.raises(DataLossError, match="failOnDataLoss=false") as caught:
        reader.latestOffset(checkpointed, ReadAllAvailable())
    assert "stream partition 0: the log was truncated and now starts at 1:0" in str(caught.value)


def test_with_failondataloss_false_a_truncated_checkpoint_skips_ahead_and_warns(cluster, streams, stream, caplog):
    reader = reader_for(cluster, stream, failOnDataLoss=False)
    checkpointed = {"0": {"ledger": 0, "entry": 2}, "1": {"ledger": 0, "entry": 0}}
    streams.truncate_before(stream, 0, "1:0")
    with caplog.at_level(logging.WARNING, logger="pyspark_ledger.spark.stream_reader"):
        end = reader.latestOffset(checkpointed, ReadAllAvailable())
        planned = entries(reader, checkpointed, end)
    assert [(partition, entry_id) for partition, _, entry_id in planned] == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert "continuing from 1:0 (failOnDataLoss=false)" in caplog.text


def test_the_reader_sent_to_executors_pickles_without_clients(cluster, stream):
    reader = reader_for(cluster, stream)
    reader.initialOffset()  # the source process has used its clients by now
    copy = cloudpickle.loads(cloudpickle.dumps(reader))
    assert copy.options == reader.options and copy.arrow_schema.equals(reader.arrow_schema)
