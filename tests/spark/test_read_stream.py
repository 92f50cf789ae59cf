"""Streaming reads through ``spark.readStream.format("ledger")``: real queries, real bookies.

Each query writes through ``foreachBatch`` into a list the test inspects, with
a checkpoint in the test's temporary directory; every query is stopped by the
test. Waiting is bounded polling on what has arrived, never a bare sleep.
"""
from __future__ import annotations

import threading

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.spark import executor  # noqa: E402
from tests.spark.read_helpers import (PASSWORD, append_rows, read_options, three_ledger_stream,  # noqa: E402
                                      wait_until)

pytestmark = pytest.mark.spark
QUERY_TIMEOUT_S = 120


@pytest.fixture
def streams(cluster):
    return executor.stream_client(cluster.metadata_uri, PASSWORD)


@pytest.fixture
def stream(request, streams):
    return three_ledger_stream(request, streams)


class Collected:
    """What a foreachBatch sink received: per micro-batch, its rows as tuples."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.batches: list[tuple[int, list[tuple]]] = []

    def __call__(self, frame, batch_id: int) -> None:
        rows = [tuple(row) for row in frame.collect()]
        with self._lock:
            self.batches.append((batch_id, rows))

    def rows(self) -> list[tuple]:
        with self._lock:
            return [row for _, rows in self.batches for row in rows]

    def entries_per_batch(self) -> list[int]:
        """Distinct entries (partition, ledger, entry) of each non-empty micro-batch."""
        with self._lock:
            return [len({row[3:6] for row in rows}) for _, rows in self.batches if rows]


@pytest.fixture
def run_query(spark, cluster, tmp_path):
    """``run_query(stream, trigger, sink, checkpoint=..., **options)`` starts a query; all are stopped at teardown."""
    started = []

    def run(stream, trigger: dict, sink: Collected, checkpoint: str = "checkpoint", **options):
        reader = spark.readStream.format("ledger").options(**read_options(cluster.metadata_uri, stream, **options))
        query = (reader.load().writeStream.foreachBatch(sink).trigger(**trigger)
                 .option("checkpointLocation", str(tmp_path / checkpoint)).start())
        started.append(query)
        return query

    try:
        yield run
    finally:
        for query in started:
            query.stop()


def by_partition(rows) -> dict[int, list[int]]:
    result: dict[int, list[int]] = {}
    for row in rows:
        result.setdefault(row[0], []).append(row[1])
    return result


def finish(query) -> None:
    assert query.awaitTermination(QUERY_TIMEOUT_S), "an availableNow query must stop by itself"
    assert query.exception() is None


# --- AvailableNow, admission control --------------------------------------------------------------------------------


def test_available_now_reads_everything_once_in_order_and_stops(run_query, stream):
    sink = Collected()
    finish(run_query(stream, {"availableNow": True}, sink, includeMetadata=True))
    assert by_partition(sink.rows()) == {0: list(range(30)), 1: list(range(15))}


def test_max_entries_per_trigger_sizes_the_micro_batches(run_query, stream):
    sink = Collected()
    query = run_query(stream, {"availableNow": True}, sink, includeMetadata=True, maxEntriesPerTrigger=4)
    finish(query)
    assert sink.entries_per_batch() == [4, 4, 1]
    assert [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]] == [20, 20, 5]
    assert by_partition(sink.rows()) == {0: list(range(30)), 1: list(range(15))}


def test_max_bytes_per_trigger_sizes_the_micro_batches(run_query, streams, stream):
    ledger_ids = [ref for logs in streams.partition_logs(stream).values() for ref in logs.spans]
    entry_bytes = max(-(-span.length // span.entry_count) for span in ledger_ids)
    sink = Collected()
    finish(run_query(stream, {"availableNow": True}, sink, includeMetadata=True,
                     maxBytesPerTrigger=entry_bytes * 2 + entry_bytes // 2))
    sizes = sink.entries_per_batch()
    assert sum(sizes) == 9 and max(sizes) <= 2 and len(sizes) >= 5
    assert by_partition(sink.rows()) == {0: list(range(30)), 1: list(range(15))}


# --- processingTime: data appended while the query runs ---------------------------------------------------------------


def test_rows_appended_while_a_query_runs_arrive(run_query, streams, stream):
    sink = Collected()
    query = run_query(stream, {"processingTime": "200 milliseconds"}, sink, includeMetadata=True)
    wait_until(lambda: len(sink.rows()) == 45 or query.exception(), what="the rows written before the start")
    append_rows(streams, stream, 1, 15, 2, 5)
    append_rows(streams, stream, 0, 30, 1, 5)
    wait_until(lambda: len(sink.rows()) == 60 or query.exception(), what="the rows appended while running")
    assert query.exception() is None
    assert by_partition(sink.rows()) == {0: list(range(35)), 1: list(range(25))}


def test_starting_offsets_latest_reads_only_what_arrives_after_the_start(spark, run_query, streams, stream):
    previous = spark.conf.get("spark.sql.streaming.noDataProgressEventInterval")
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")  # report idle triggers too
    try:
        sink = Collected()
        query = run_query(stream, {"processingTime": "200 milliseconds"}, sink, startingOffsets="latest")
        wait_until(lambda: query.lastProgress is not None or query.exception(), what="the query to start")
        append_rows(streams, stream, 0, 30, 2, 5)
        wait_until(lambda: len(sink.rows()) == 10 or query.exception(), what="the rows appended after the start")
    finally:
        spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", previous)
    assert query.exception() is None
    assert by_partition(sink.rows()) == {0: list(range(30, 40))}


def test_json_starting_offsets_start_each_partition_where_named(run_query, stream):
    sink = Collected()
    finish(run_query(stream, {"availableNow": True}, sink, startingOffsets='{"0": "1:1", "1": {"ledger": 0, "entry": 2}}'))
    assert by_partition(sink.rows()) == {0: list(range(25, 30)), 1: list(range(10, 15))}


# --- failOnDataLoss after truncation past the checkpoint (docs/protocol.md S3) ----------------------------------------


@pytest.fixture
def truncated_past_checkpoint(run_query, streams, stream):
    """A query read partition 0's first two ledgers; then ledgers 2 and 3 came and 0..2 were truncated."""
    first = Collected()
    finish(run_query(stream, {"availableNow": True}, first, checkpoint="lossy"))
    assert len(first.rows()) == 45
    following = append_rows(streams, stream, 0, 30, 2, 5)
    append_rows(streams, stream, 0, following, 3, 5)
    streams.truncate_before(stream, 0, "3:0")
    return stream


def test_fail_on_data_loss_stops_the_query_naming_the_option(run_query, truncated_past_checkpoint):
    query = run_query(truncated_past_checkpoint, {"availableNow": True}, Collected(), checkpoint="lossy")
    with pytest.raises(Exception) as caught:
        query.awaitTermination(QUERY_TIMEOUT_S)
    text = str(caught.value)
    assert "the log was truncated and now starts at 3:0" in text
    assert "Set the option failOnDataLoss=false" in text


def test_without_fail_on_data_loss_the_query_skips_ahead(run_query, truncated_past_checkpoint):
    sink = Collected()
    finish(run_query(truncated_past_checkpoint, {"availableNow": True}, sink, checkpoint="lossy",
                     failOnDataLoss=False))
    assert by_partition(sink.rows()) == {0: list(range(40, 55))}
