"""Batch reads through ``spark.read.format("ledger")`` against real bookie processes.

Streams are written directly with ``StreamClient`` (``read_helpers``); Spark
reads them in local mode through the auto-registered ``DefaultSource``.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.client.config import ClientConfig  # noqa: E402
from pyspark_ledger.client.ledger_client import LedgerClient  # noqa: E402
from pyspark_ledger.log.stream_client import StreamClient  # noqa: E402
from pyspark_ledger.log.stream_schema import stored_schema  # noqa: E402
from pyspark_ledger.log.stream_store import read_stream  # noqa: E402
from pyspark_ledger.metadata import open_metadata_store  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from pyspark_ledger.spark.arrow_codec import encode_batch  # noqa: E402
from pyspark_ledger.spark.batch_reader import entries_per_split  # noqa: E402
from pyspark_ledger.spark.schema import conform_batch  # noqa: E402
from tests.spark.read_helpers import (PASSWORD, SCHEMA, append_rows, commit, read_options, rows_batch,  # noqa: E402
                                      unique_stream, write_ledger)

pytestmark = pytest.mark.spark


@pytest.fixture
def streams(cluster):
    return executor.stream_client(cluster.metadata_uri, PASSWORD)


@pytest.fixture
def stream(request, streams):
    name = unique_stream(request)
    streams.create_stream(name, 2, SCHEMA)
    return name


def load(spark, cluster, stream, **options):
    return spark.read.format("ledger").options(**read_options(cluster.metadata_uri, stream, **options)).load()


def seqs(rows) -> list[tuple[int, int]]:
    return [(row.p, row.seq) for row in rows]


# --- what was written, in commit order, with its metadata columns ---------------------------------------------


def test_multi_partition_multi_ledger_stream_is_read_in_commit_order_with_metadata(spark, cluster, streams,
                                                                                    stream):
    expected = {0: [], 1: []}  # partition -> [(p, seq, text, _partition, _ledger_id, _entry_id)]
    next_seq = {0: 0, 1: 0}

    def ledger(partition: int, entries: int, rows: int) -> int:
        batches = []
        for _ in range(entries):
            batches.append(rows_batch(partition, next_seq[partition], rows))
            next_seq[partition] += rows
        ledger_id = write_ledger(streams, stream, partition, batches)
        for entry_id, batch in enumerate(batches):
            expected[partition] += [(partition, seq, f"p{partition}-row{seq}", partition, ledger_id, entry_id)
                                    for seq in batch.column("seq").to_pylist()]
        return ledger_id

    first, second = ledger(0, 3, 4), ledger(0, 2, 5)
    commit(streams, stream, {0: [first, second], 1: [ledger(1, 1, 3)]})
    commit(streams, stream, {1: [ledger(1, 4, 2)]})
    commit(streams, stream, {0: [ledger(0, 1, 7)], 1: [ledger(1, 2, 1)]})

    frame = load(spark, cluster, stream, includeMetadata=True)
    assert frame.columns == ["p", "seq", "text", "_partition", "_ledger_id", "_entry_id"]
    assert [tuple(row) for row in frame.collect()] == expected[0] + expected[1]
    plain = load(spark, cluster, stream)
    assert plain.columns == ["p", "seq", "text"]
    assert seqs(plain.collect()) == [row[:2] for row in expected[0] + expected[1]]


def test_an_empty_stream_reads_as_no_rows_with_its_schema(spark, cluster, stream):
    frame = load(spark, cluster, stream)
    assert frame.schema.simpleString() == "struct<p:int,seq:bigint,text:string>"
    assert frame.collect() == []


def test_values_of_every_kind_come_back_exactly(spark, cluster, streams, request):
    raw = pa.RecordBatch.from_pylist([
        {"n": 1, "f": 0.5, "s": "ä", "b": b"\x00\xff", "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc),
         "day": dt.date(2020, 2, 29), "price": decimal.Decimal("12.345"), "ok": True,
         "tags": ["x", None], "who": {"id": 7, "points": [1.5, None]}, "scores": [("a", 1)]},
        {"n": None, "f": None, "s": None, "b": None, "ts": None, "day": None, "price": None, "ok": None,
         "tags": None, "who": None, "scores": None},
        {"n": -3, "f": float("inf"), "s": "", "b": b"", "ts": dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc),
         "day": dt.date(1, 1, 1), "price": decimal.Decimal("-0.001"), "ok": False,
         "tags": [], "who": {"id": None, "points": []}, "scores": []},
    ], schema=pa.schema([
        pa.field("n", pa.int64()), pa.field("f", pa.float64()), pa.field("s", pa.string()),
        pa.field("b", pa.binary()), pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("day", pa.date32()),
        pa.field("price", pa.decimal128(12, 3)), pa.field("ok", pa.bool_()), pa.field("tags", pa.list_(pa.string())),
        pa.field("who", pa.struct([pa.field("id", pa.int32()), pa.field("points", pa.list_(pa.float64()))])),
        pa.field("scores", pa.map_(pa.string(), pa.int64()))]))
    stored = stored_schema(raw.schema)
    name = unique_stream(request)
    streams.create_stream(name, 1, stored)
    batch = conform_batch(raw, stored)
    writer = streams.create_ledger(name, 0)
    writer.append(encode_batch(batch))
    writer.close()
    commit(streams, name, {0: [writer.ledger_id]})

    got = load(spark, cluster, name).toArrow()
    assert got.column_names == stored.names
    assert got.cast(stored).to_pylist() == pa.Table.from_batches([batch]).to_pylist()


# --- input partitions -------------------------------------------------------------------------------------------


def test_one_big_ledger_is_read_by_several_tasks_of_even_size(spark, cluster, streams, stream):
    entries = 2500
    commit(streams, stream, {0: [write_ledger(streams, stream, 0, [rows_batch(0, i, 1) for i in range(entries)])]})
    per_split = entries_per_split(streams.partition_logs(stream)[0])
    assert per_split < entries, "the test ledger must be larger than one split"
    tasks = -(-entries // per_split)
    firsts = [index * entries // tasks for index in range(tasks + 1)]  # even chunks: no small leftover task

    frame = load(spark, cluster, stream, includeMetadata=True)
    assert frame.rdd.getNumPartitions() == tasks >= 2
    spans = (frame.selectExpr("spark_partition_id() AS task", "_entry_id", "seq")
             .groupBy("task").agg({"_entry_id": "min", "seq": "count"}).collect())
    counts = sorted((row["min(_entry_id)"], row["count(seq)"]) for row in spans)
    assert len(counts) >= 2 and sum(count for _, count in counts) == entries
    assert counts == [(begin, end - begin) for begin, end in zip(firsts, firsts[1:])]
    assert max(count for _, count in counts) - min(count for _, count in counts) <= 1
    assert seqs(frame.collect()) == [(0, seq) for seq in range(entries)]


# --- startingOffsets / endingOffsets --------------------------------------------------------------------------------


@pytest.fixture
def offsets_stream(streams, stream):
    """Partition 0: ledger seq 0 with entries 0..4, seq 1 with 0..2; partition 1: seq 0 with 0..3 (2 rows each)."""
    following = append_rows(streams, stream, 0, 0, 5, 2)
    append_rows(streams, stream, 0, following, 3, 2)
    append_rows(streams, stream, 1, 0, 4, 2)
    return stream


def rows_of(partition: int, first_entry: int, last_entry: int, seq_base: int = 0) -> list[tuple[int, int]]:
    return [(partition, seq) for seq in range(seq_base + first_entry * 2, seq_base + (last_entry + 1) * 2)]


@pytest.mark.parametrize("starting, ending", [(None, None), ("earliest", "latest"),
                                              ('{"0": "earliest", "1": -2}', '{"0": "latest", "1": -1}')])
def test_earliest_to_latest_reads_everything(spark, cluster, offsets_stream, starting, ending):
    options = {key: value for key, value in (("startingOffsets", starting), ("endingOffsets", ending)) if value}
    got = seqs(load(spark, cluster, offsets_stream, **options).collect())
    assert got == rows_of(0, 0, 7) + rows_of(1, 0, 3)


def test_json_offsets_select_entry_ranges_per_partition(spark, cluster, offsets_stream):
    starting = json.dumps({"0": {"ledger": 0, "entry": 3}, "1": "0:1"})
    ending = json.dumps({"0": "1:2", "1": {"ledger": 0, "entry": 3}})
    got = seqs(load(spark, cluster, offsets_stream, startingOffsets=starting, endingOffsets=ending).collect())
    assert got == rows_of(0, 3, 4) + rows_of(0, 0, 1, seq_base=10) + rows_of(1, 1, 2)


def test_offsets_at_ledger_ends_are_the_same_point_as_the_next_ledger(spark, cluster, offsets_stream):
    got = seqs(load(spark, cluster, offsets_stream, startingOffsets='{"0": "0:5", "1": "0:4"}',
                    endingOffsets='{"0": "1:0"}').collect())
    assert got == []
    got = seqs(load(spark, cluster, offsets_stream, startingOffsets='{"0": "1:0", "1": "0:4"}',
                    endingOffsets='{"0": "0:5"}').collect())
    assert got == []
    got = seqs(load(spark, cluster, offsets_stream, startingOffsets='{"0": "1:0", "1": "0:4"}').collect())
    assert got == rows_of(0, 0, 2, seq_base=10)


@pytest.mark.parametrize("starting, ending, message", [
    (None, '{"0": "0:9"}', "option endingOffsets puts partition 0 at 0:9, but ledger 0 of its log ends at entry 4"),
    (None, '{"1": "4:0"}', "option endingOffsets puts partition 1 at 4:0, beyond the readable end of its log"),
    ('{"0": "1:1"}', '{"0": "0:2"}', "the end is before the start"),
    (None, '{"7": "latest"}', "option endingOffsets names partition(s) [7], but the stream has 2 partition(s)"),
])
def test_offsets_the_log_cannot_honour_fail_naming_the_option(spark, cluster, offsets_stream, starting, ending,
                                                              message):
    options = {key: value for key, value in (("startingOffsets", starting), ("endingOffsets", ending)) if value}
    with pytest.raises(Exception) as caught:
        load(spark, cluster, offsets_stream, **options).collect()
    assert message in str(caught.value)


def test_a_truncated_start_fails_or_skips_ahead_by_failondataloss(spark, cluster, streams, offsets_stream):
    streams.truncate_before(offsets_stream, 0, "1:0")  # ledger 0 of partition 0 is gone
    with pytest.raises(Exception) as caught:
        load(spark, cluster, offsets_stream, startingOffsets='{"0": "0:2"}').collect()
    assert "Set the option failOnDataLoss=false" in str(caught.value)
    assert "the log was truncated and now starts at 1:0" in str(caught.value)

    got = seqs(load(spark, cluster, offsets_stream, startingOffsets='{"0": "0:2"}', failOnDataLoss=False).collect())
    assert got == rows_of(0, 0, 2, seq_base=10) + rows_of(1, 0, 3)
    assert seqs(load(spark, cluster, offsets_stream).collect()) == got


def test_a_ledger_deleted_under_the_stream_fails_naming_it_or_is_skipped(spark, cluster, streams, offsets_stream):
    lost = read_stream(streams.context.store, offsets_stream).value.partition(0).ledgers[0].ledger_id
    streams.client.delete_ledger(lost, PASSWORD)  # by hand (ledger ledgers delete --force)
    with pytest.raises(Exception) as caught:
        load(spark, cluster, offsets_stream).collect()
    assert f"ledger {lost} (sequence number 0 of the log) is lost" in str(caught.value)
    assert "positions 0:0 up to 1:0 cannot be read" in str(caught.value)
    assert "kept being deleted" not in str(caught.value)

    got = seqs(load(spark, cluster, offsets_stream, failOnDataLoss=False).collect())
    assert got == rows_of(0, 0, 2, seq_base=10) + rows_of(1, 0, 3)


# --- only confirmed entries -------------------------------------------------------------------------------------------


@pytest.fixture
def quiet_writer_streams(cluster):
    """A StreamClient whose writers never send an explicit LAC: readers learn entry N from entry N+1 only."""
    config = ClientConfig()
    if any(item.name == "explicit_lac_interval_s" for item in dataclasses.fields(config)):
        config = dataclasses.replace(config, explicit_lac_interval_s=0)
    store = open_metadata_store(cluster.metadata_uri)
    client = LedgerClient(store, config)
    try:
        yield StreamClient(store, password=PASSWORD, client=client)
    finally:
        client.close()
        store.close()


def test_an_open_ledger_is_read_only_up_to_its_last_add_confirmed(spark, cluster, quiet_writer_streams, request):
    streams = quiet_writer_streams
    name = unique_stream(request)
    streams.create_stream(name, 1, SCHEMA)
    writer = streams.open_writer(name, 0)
    try:
        for index in range(6):
            writer.append(encode_batch(rows_batch(0, index * 3, 3)))
        reader = streams.client.open_ledger(writer.ledger_id, PASSWORD.encode(), recovery=False)
        assert reader.last_add_confirmed == 4, "the last add is confirmed to the writer, not yet to readers"
        assert seqs(load(spark, cluster, name).collect()) == [(0, seq) for seq in range(15)]
    finally:
        writer.close()
    assert seqs(load(spark, cluster, name).collect()) == [(0, seq) for seq in range(18)]


# --- the stream itself ------------------------------------------------------------------------------------------------


def test_reading_a_stream_that_does_not_exist_fails_clearly(spark, cluster):
    with pytest.raises(Exception) as caught:
        load(spark, cluster, "no-such-stream").collect()
    text = str(caught.value)
    assert "stream 'no-such-stream' does not exist" in text and "check the option stream" in text


def test_reading_a_stream_without_a_schema_fails_clearly(spark, cluster, streams, request):
    name = unique_stream(request)
    streams.create_stream(name, 1)
    with pytest.raises(Exception) as caught:
        load(spark, cluster, name).collect()
    assert f"stream {name!r} has no schema" in str(caught.value)


def test_max_partition_bytes_sets_how_many_entries_one_task_reads():
    from pyspark_ledger.log.log_spans import LedgerSpan, PartitionLog
    from pyspark_ledger.spark.batch_reader import ENTRY_COST_BYTES, SPLIT_BYTES
    from pyspark_ledger.spark.options import parse_read_options
    from pyspark_ledger.spark.batch_reader import plan_batch

    mib = 2**20
    log = PartitionLog((LedgerSpan(0, 7, 249, 250 * mib), LedgerSpan(1, 8, 249, 250 * mib)))  # 2 × 250 MiB
    assert entries_per_split(log) == SPLIT_BYTES // (mib + ENTRY_COST_BYTES) == 120
    assert entries_per_split(log, 512 * mib) == 481
    base = {"metadataserviceuri": "sqlite:///x.db", "stream": "s"}
    default = plan_batch(parse_read_options(base), {0: log})
    larger = plan_batch(parse_read_options({**base, "maxpartitionbytes": "512m"}), {0: log})
    assert len(default) == 6 and len(larger) == 2  # one task per ledger: Spark's per-task cost paid twice
    assert [(r.ledger_id, r.first_entry_id, r.last_entry_id) for r in larger] == [(7, 0, 249), (8, 0, 249)]
