"""The sink's task and commit halves against real bookie processes, without a Spark session.

``plan_sink`` / ``write_task`` / ``commit_write`` / ``abort_write`` are called
exactly as Spark calls them through ``LedgerBatchWriter``: plan on the driver,
one ``write_task`` per input partition, one commit with every task's
message. What was written is read back with ``StreamClient`` readers and the
Arrow entry codec, and every ledger in the metadata store is accounted for
(no orphan left behind by a failed task, a replay or an abort).
"""
from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.errors import (InvalidArgumentError, InvalidStateError, LedgerError,
                                   MetadataVersionConflictError)  # noqa: E402
from pyspark_ledger.log.log_metadata import Replication  # noqa: E402
from pyspark_ledger.log.retention import Cut  # noqa: E402
from pyspark_ledger.log.stream_store import read_stream  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from pyspark_ledger.spark.arrow_codec import decode_batch  # noqa: E402
from pyspark_ledger.spark.options import parse_write_options  # noqa: E402
from pyspark_ledger.spark.sink import LedgerBatchWriter  # noqa: E402
from pyspark_ledger.spark.sink_commit import abort_write, commit_write  # noqa: E402
from pyspark_ledger.spark.sink_overwrite import Replacement, _replace  # noqa: E402
from pyspark_ledger.spark.sink_plan import plan_sink  # noqa: E402
from pyspark_ledger.spark.sink_task import write_task  # noqa: E402
from tests.spark.read_helpers import unique_stream  # noqa: E402

PASSWORD = "sink-tests"
SPARK_SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "name", "type": "string", "nullable": True, "metadata": {}}]}


def spark_schema(doc=None):
    from pyspark.sql.types import StructType

    return StructType.fromJson(doc or SPARK_SCHEMA)


def rows(first: int, count: int, *, reverse_columns: bool = False) -> pa.RecordBatch:
    ids = pa.array(range(first, first + count), pa.int64())
    names = pa.array([None if i % 7 == 0 else f"row-{i}" for i in range(first, first + count)], pa.string())
    if reverse_columns:
        return pa.record_batch([names, ids], names=["name", "id"])
    return pa.record_batch([ids, names], names=["id", "name"])


@pytest.fixture
def streams(cluster):
    return executor.stream_client(cluster.metadata_uri, PASSWORD)


@pytest.fixture
def stream(request) -> str:
    return unique_stream(request)


def plan(cluster, stream, *, overwrite=False, schema=None, **options):
    parsed = parse_write_options({"metadataServiceUri": cluster.metadata_uri, "stream": stream,
                                  "password": PASSWORD, **{k: str(v) for k, v in options.items()}})
    return plan_sink(parsed, spark_schema(schema), overwrite=overwrite)


def read_partition(streams, stream: str, partition: int) -> list[tuple]:
    """Every row of a partition, in log order, as (id, name) tuples; checks each entry's schema."""
    stored = streams.open_stream(stream).arrow_schema()
    found = []
    for entry in streams.open_reader(stream, partition).entries():
        batch = decode_batch(entry.data)
        assert batch.schema.equals(stored)
        found += list(zip(batch.column("id").to_pylist(), batch.column("name").to_pylist()))
    return found


def expected(first: int, count: int) -> list[tuple]:
    return list(zip(*(column.to_pylist() for column in rows(first, count).columns)))


def all_ledgers(streams) -> set[int]:
    return set(streams.client.list_ledgers())


def held_ledgers(streams, stream: str) -> set[int]:
    return read_stream(streams.context.store, stream).value.all_ledger_ids()


# --- round trips -----------------------------------------------------------------------------------


def test_new_stream_gets_one_partition_per_task_and_every_row_in_order(cluster, streams, stream):
    before = all_ledgers(streams)
    sink = plan(cluster, stream, rowsPerEntry=40)
    assert not sink.exists and sink.partition_count is None
    messages = [write_task(sink, [rows(0, 100), rows(100, 50, reverse_columns=True)], 0),
                write_task(sink, [], 1),
                write_task(sink, iter([rows(1000, 30)]), 2)]
    assert [(m.partition, m.rows, m.entries, len(m.ledger_ids)) for m in messages] == \
        [(0, 150, 4, 1), (1, 0, 0, 0), (2, 30, 1, 1)]
    assert all(m.bytes > 0 for m in messages if m.rows)
    result = commit_write(sink, messages, "writer-a", 0)
    assert result.committed
    info = streams.open_stream(stream)
    assert info.partitions == 3 and info.replication == Replication(3, 3, 2, "crc32c")
    assert info.arrow_schema().names == ["id", "name"]
    assert read_partition(streams, stream, 0) == expected(0, 150)
    assert read_partition(streams, stream, 1) == []
    assert read_partition(streams, stream, 2) == expected(1000, 30)
    assert all_ledgers(streams) - before == held_ledgers(streams, stream)


def test_existing_stream_takes_task_partition_modulo_its_partitions_in_task_order(cluster, streams, stream):
    streams.create_stream(stream, 2)
    sink = plan(cluster, stream, partitions=7, ensembleSize=2, writeQuorum=2, ackQuorum=1)
    assert sink.exists and sink.partition_count == 2 and sink.replication == Replication(3, 3, 2, "crc32c")
    messages = [write_task(sink, [rows(100 * t, 10)], t) for t in (3, 0, 2, 1)]
    assert [m.partition for m in messages] == [1, 0, 0, 1]
    assert commit_write(sink, messages, "writer-b", 0).committed
    assert streams.open_stream(stream).arrow_schema().names == ["id", "name"]  # adopted by the empty stream
    assert read_partition(streams, stream, 0) == expected(0, 10) + expected(200, 10)
    assert read_partition(streams, stream, 1) == expected(100, 10) + expected(300, 10)


def test_partitions_option_sets_a_new_streams_partition_count(cluster, streams, stream):
    sink = plan(cluster, stream, partitions=2, ensembleSize=3, writeQuorum=2, ackQuorum=2, digest="hmac-sha256")
    messages = [write_task(sink, [rows(10 * t, 5)], t) for t in range(5)]
    assert commit_write(sink, messages, "writer-c", 0).committed
    info = streams.open_stream(stream)
    assert info.partitions == 2 and info.replication == Replication(3, 2, 2, "hmac-sha256")
    assert read_partition(streams, stream, 0) == expected(0, 5) + expected(20, 5) + expected(40, 5)
    assert read_partition(streams, stream, 1) == expected(10, 5) + expected(30, 5)


def test_an_empty_write_creates_the_stream_with_its_schema(cluster, streams, stream):
    sink = plan(cluster, stream)
    assert commit_write(sink, [write_task(sink, [], 0)], "writer-d", 0).committed
    info = streams.open_stream(stream)
    assert info.partitions == 1 and info.arrow_schema().names == ["id", "name"]


def test_second_append_follows_the_first(cluster, streams, stream):
    for first in (0, 500):
        sink = plan(cluster, stream)
        writer = LedgerBatchWriter(sink)
        writer.commit([write_task(sink, [rows(first, 20)], 0)])
    assert read_partition(streams, stream, 0) == expected(0, 20) + expected(500, 20)
    assert streams.open_stream(stream).partitions == 1


# --- exactly once ------------------------------------------------------------------------------------


def test_replayed_commit_changes_nothing_and_deletes_the_replays_ledgers(cluster, streams, stream):
    sink = plan(cluster, stream)
    first = [write_task(sink, [rows(0, 10)], 0)]
    assert commit_write(sink, first, "query-1", 5).committed
    record = read_stream(streams.context.store, stream)
    replay = [write_task(sink, [rows(0, 10)], 0)]  # Spark re-ran batch 5 after a restart
    older = [write_task(sink, [rows(0, 10)], 0)]
    assert not commit_write(sink, replay, "query-1", 5).committed
    assert not commit_write(sink, older, "query-1", 4).committed
    assert read_stream(streams.context.store, stream).value == record.value
    gone = set(replay[0].ledger_ids) | set(older[0].ledger_ids)
    assert not gone & all_ledgers(streams)
    assert commit_write(sink, [write_task(sink, [rows(10, 3)], 0)], "query-1", 6).committed
    assert read_partition(streams, stream, 0) == expected(0, 13)


def test_batch_writes_leave_a_streaming_writers_id_in_place(cluster, streams, stream):
    sink = plan(cluster, stream)
    assert commit_write(sink, [write_task(sink, [rows(0, 10)], 0)], "query-1", 5).committed
    for first in (10, 20):
        LedgerBatchWriter(plan(cluster, stream)).commit([write_task(sink, [rows(first, 10)], 0)])
    replacing = plan(cluster, stream, overwrite=True)
    LedgerBatchWriter(replacing).commit([write_task(replacing, [rows(100, 5)], 0)])
    LedgerBatchWriter(plan(cluster, stream)).commit([write_task(sink, [rows(105, 5)], 0)])
    assert read_stream(streams.context.store, stream).value.writers == (("query-1", 5),)  # batch writes: none
    replay = [write_task(sink, [rows(0, 10)], 0)]
    assert not commit_write(sink, replay, "query-1", 5).committed  # the streaming replay is still a no-op
    assert not set(replay[0].ledger_ids) & all_ledgers(streams)
    assert read_partition(streams, stream, 0) == expected(100, 10)


def test_failing_task_deletes_its_ledger_and_raises(cluster, streams, stream):
    sink = plan(cluster, stream, rowsPerEntry=5)
    before = all_ledgers(streams)

    def batches():
        yield rows(0, 12)
        yield rows(12, 12)
        raise RuntimeError("upstream failed")

    with pytest.raises(RuntimeError, match="upstream failed"):
        write_task(sink, batches(), 0)
    assert all_ledgers(streams) == before


def test_task_refuses_a_batch_that_does_not_fit_the_schema_and_cleans_up(cluster, streams, stream):
    sink = plan(cluster, stream)
    before = all_ledgers(streams)
    wrong = pa.record_batch([pa.array([1], pa.int64())], names=["other"])
    with pytest.raises(InvalidArgumentError, match="does not fit the schema"):
        write_task(sink, [rows(0, 3), wrong], 0)
    assert all_ledgers(streams) == before


def test_abort_deletes_the_finished_tasks_ledgers(cluster, streams, stream):
    before = all_ledgers(streams)
    sink = plan(cluster, stream)
    messages = [write_task(sink, [rows(0, 10)], 0), None, write_task(sink, [rows(0, 10)], 2)]
    assert abort_write(sink, messages) == {messages[0].ledger_ids[0], messages[2].ledger_ids[0]}
    assert all_ledgers(streams) == before
    streams.create_stream(stream, 1, spark_schema_arrow())
    again = [write_task(sink, [rows(0, 10)], 0)]
    LedgerBatchWriter(sink).abort(again)
    assert all_ledgers(streams) == before


def spark_schema_arrow():
    from pyspark_ledger.spark.schema import spark_to_arrow_schema

    return spark_to_arrow_schema(spark_schema())


# --- schema checks on the driver, before any task ------------------------------------------------------


def test_incompatible_schema_is_refused_when_planning(cluster, streams, stream):
    streams.create_stream(stream, 1, spark_schema_arrow())
    other = {"type": "struct", "fields": [{"name": "id", "type": "string", "nullable": True, "metadata": {}},
                                          {"name": "extra", "type": "double", "nullable": True, "metadata": {}}]}
    before = all_ledgers(streams)
    with pytest.raises(InvalidArgumentError) as caught:
        plan(cluster, stream, schema=other)
    message = str(caught.value)
    assert f"cannot write to stream {stream!r}" in message
    assert "field 'id': the stream has int64, the data has string" in message
    assert "the data lacks field 'name'" in message and "the stream has no field 'extra'" in message
    assert all_ledgers(streams) == before


def test_stream_created_meanwhile_with_another_schema_fails_the_commit(cluster, streams, stream):
    sink = plan(cluster, stream)
    messages = [write_task(sink, [rows(0, 5)], 0)]
    other = pa.schema([pa.field("id", pa.string())])
    streams.create_stream(stream, 1, other)
    with pytest.raises(InvalidArgumentError, match="its schema differs"):
        commit_write(sink, messages, "writer-e", 0)
    abort_write(sink, messages)  # what Spark does after a failed commit
    assert not set(messages[0].ledger_ids) & all_ledgers(streams)


def test_schemaless_stream_with_entries_is_refused(cluster, streams, stream):
    streams.create_stream(stream, 1)
    writer = streams.create_ledger(stream, 0)
    writer.append(b"raw bytes, not Arrow")
    writer.close()
    assert streams.commit_ledgers(stream, "log-api", 0, {0: [writer.ledger_id]}).committed
    with pytest.raises(InvalidStateError, match="has no Arrow schema but holds entries"):
        plan(cluster, stream)


# --- overwrite ---------------------------------------------------------------------------------------


def test_overwrite_replaces_every_partition_at_once_and_deletes_the_old_ledgers(cluster, streams, stream):
    sink = plan(cluster, stream, partitions=2)
    assert commit_write(sink, [write_task(sink, [rows(0, 10)], t) for t in range(2)], "w-1", 0).committed
    old = held_ledgers(streams, stream)
    open_writer = streams.open_writer(stream, 1)  # a log writer still appending to partition 1
    open_writer.append(b"x")
    replacing = plan(cluster, stream, overwrite=True)
    messages = [write_task(replacing, [rows(900, 4)], 0)]
    assert commit_write(replacing, messages, "w-2", 0).committed
    assert read_partition(streams, stream, 0) == expected(900, 4)
    assert read_partition(streams, stream, 1) == []
    assert held_ledgers(streams, stream) == set(messages[0].ledger_ids)
    assert not old & all_ledgers(streams)
    with pytest.raises(LedgerError):
        open_writer.append(b"after the overwrite")  # fenced: it cannot write into a deleted ledger
    with pytest.raises(LedgerError):
        open_writer.close()


def test_overwrite_transition_refuses_a_log_that_grew_after_its_end_was_read(cluster, streams, stream):
    sink = plan(cluster, stream)
    assert commit_write(sink, [write_task(sink, [rows(0, 3)], 0)], "w-1", 0).committed
    record = read_stream(streams.context.store, stream).value
    stale_cuts = {0: Cut(record.partition(0).next_seq - 2, 0)}  # read before the last ledger arrived
    batch = Replacement("w-2", 0, {0: (12345,)})
    with pytest.raises(MetadataVersionConflictError, match="grew while it was being overwritten"):
        _replace(record, stale_cuts, batch, 0)
    with pytest.raises(MetadataVersionConflictError):
        _replace(record, {}, batch, 0)
    assert _replace(record, {}, Replacement("w-1", 0, {}), 0) is None  # already committed: nothing to do
    fresh = {0: Cut(record.partition(0).next_seq - 1, 0)}
    replaced = _replace(record, fresh, batch, 7)
    assert replaced.partition(0).ledger_ids == (12345,) and replaced.last_batch("w-2") == 0
    assert set(record.partition(0).ledger_ids) <= set(replaced.garbage)
    one_off = _replace(record, fresh, Replacement("batch-1", 0, {0: (12345,)}, remember_writer=False), 7)
    assert one_off.partition(0).ledger_ids == (12345,) and one_off.writers == record.writers
    assert _replace(one_off, {0: Cut(one_off.partition(0).next_seq - 1, 0)},
                    Replacement("batch-1", 0, {0: (12345,)}, remember_writer=False), 8) is None  # retried


def test_plan_pickles_without_its_password_in_repr(cluster, stream):
    import pickle

    sink = plan(cluster, stream)
    assert PASSWORD not in repr(sink)
    writer = LedgerBatchWriter(sink)
    copy = pickle.loads(pickle.dumps(writer))
    assert copy.plan == sink and copy.writer_id == writer.writer_id
    assert copy.writer_id != LedgerBatchWriter(sink).writer_id
