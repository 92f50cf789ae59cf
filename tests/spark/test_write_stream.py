"""Streaming writes through ``df.writeStream.format("ledger")``: exactly once across restarts (docs/protocol.md S1).

The input is a directory of JSON files read one file per micro-batch, so
every micro-batch holds known rows. A query is run with
``trigger(availableNow=True)``, stopped, and started again from its checkpoint;
to replay a micro-batch the sink had committed (Spark crashed before it
recorded the commit), the checkpoint's last ``commits/<batch>`` marker is
removed before the restart, exactly what such a crash leaves behind.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.log.stream_store import read_stream  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from tests.spark.read_helpers import unique_stream  # noqa: E402

pytestmark = pytest.mark.spark
PASSWORD = "stream-write"
INPUT_DDL = "id bigint, name string"
ROWS_PER_FILE = 40
QUERY_TIMEOUT_S = 240


@pytest.fixture
def streams(cluster):
    return executor.stream_client(cluster.metadata_uri, PASSWORD)


@pytest.fixture
def stream(request) -> str:
    return unique_stream(request)


def add_files(folder: Path, numbers) -> None:
    """One JSON file per number n, holding ids n*ROWS_PER_FILE .. +ROWS_PER_FILE-1."""
    folder.mkdir(parents=True, exist_ok=True)
    for number in numbers:
        first = number * ROWS_PER_FILE
        lines = [json.dumps({"id": i, "name": f"row-{i}"}) for i in range(first, first + ROWS_PER_FILE)]
        staged = folder / f".f{number:03d}.tmp"
        staged.write_text("\n".join(lines) + "\n")
        staged.rename(folder / f"f{number:03d}.json")  # the file source must never see a partial file


def run_query(spark, cluster, stream, source: Path, checkpoint: Path | None, query_name=None, **options):
    frame = spark.readStream.schema(INPUT_DDL).option("maxFilesPerTrigger", 1).json(str(source))
    writer = (frame.writeStream.format("ledger").option("metadataServiceUri", cluster.metadata_uri)
              .option("password", PASSWORD).option("stream", stream).options(**options)
              .trigger(availableNow=True))
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", str(checkpoint))
    if query_name is not None:
        writer = writer.queryName(query_name)
    query = writer.start()
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the availableNow query did not finish"
    finally:
        query.stop()
    if query.exception() is not None:
        raise query.exception()
    return query


def ids_in(spark, cluster, stream) -> list[int]:
    frame = (spark.read.format("ledger").option("metadataServiceUri", cluster.metadata_uri)
             .option("password", PASSWORD).load(stream))
    return [row.id for row in frame.collect()]


def orphans(streams, stream) -> set[int]:
    return set(streams.client.list_ledgers()) - read_stream(streams.context.store, stream).value.all_ledger_ids()


def query_writer_id(checkpoint: Path) -> str:
    return "query-" + json.loads((checkpoint / "metadata").read_text())["id"]


def test_restart_from_checkpoint_with_a_replayed_batch_writes_every_row_once(spark, cluster, streams, stream,
                                                                            tmp_path):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    add_files(source, range(3))
    run_query(spark, cluster, stream, source, checkpoint, rowsPerEntry=16)
    assert sorted(ids_in(spark, cluster, stream)) == list(range(3 * ROWS_PER_FILE))
    writer_id = query_writer_id(checkpoint)
    assert streams.last_committed_batch(stream, writer_id) == 2
    committed = read_stream(streams.context.store, stream).value

    for marker in ("2", ".2.crc"):  # the sink committed batch 2, Spark never recorded it
        (checkpoint / "commits" / marker).unlink()
    add_files(source, range(3, 5))
    run_query(spark, cluster, stream, source, checkpoint, rowsPerEntry=16)

    assert (checkpoint / "commits" / "2").exists(), "Spark ran batch 2 again"
    ids = ids_in(spark, cluster, stream)
    assert sorted(ids) == list(range(5 * ROWS_PER_FILE)), "no row lost, none written twice"
    after = read_stream(streams.context.store, stream).value
    assert streams.last_committed_batch(stream, writer_id) == 4
    assert committed.all_ledger_ids() <= after.all_ledger_ids()
    assert not orphans(streams, stream), "the replayed batch's new ledgers were deleted"


def test_a_new_checkpoint_is_a_new_writer_whose_batches_are_appended(spark, cluster, streams, stream, tmp_path):
    source = tmp_path / "in"
    add_files(source, range(2))
    first, second = tmp_path / "checkpoint-1", tmp_path / "checkpoint-2"
    run_query(spark, cluster, stream, source, first)
    run_query(spark, cluster, stream, source, second)  # batch ids 0 and 1 again, under another query id
    assert query_writer_id(first) != query_writer_id(second)
    assert sorted(ids_in(spark, cluster, stream)) == sorted(2 * list(range(2 * ROWS_PER_FILE)))


def test_writer_id_option_names_the_writer(spark, cluster, streams, stream, tmp_path):
    source = tmp_path / "in"
    add_files(source, range(2))
    run_query(spark, cluster, stream, source, tmp_path / "checkpoint", writerId="orders-etl")
    assert streams.last_committed_batch(stream, "orders-etl") == 1
    assert sorted(ids_in(spark, cluster, stream)) == list(range(2 * ROWS_PER_FILE))


def test_complete_output_mode_is_refused_clearly(spark, cluster, stream, tmp_path):
    from pyspark.errors import PySparkException

    source = tmp_path / "in"
    add_files(source, range(1))
    counts = spark.readStream.schema(INPUT_DDL).json(str(source)).groupBy("name").count()
    with pytest.raises(PySparkException) as caught:
        query = (counts.writeStream.format("ledger").outputMode("complete")
                 .option("metadataServiceUri", cluster.metadata_uri).option("stream", stream)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        try:
            query.awaitTermination(QUERY_TIMEOUT_S)
        finally:
            query.stop()
    assert "only appends" in str(caught.value) and "outputMode('append')" in str(caught.value)


def test_checkpoint_from_the_session_conf_needs_a_writer_id(spark, cluster, stream, tmp_path):
    from pyspark.errors import PySparkException

    source = tmp_path / "in"
    add_files(source, range(1))
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "checkpoints"))
    try:
        with pytest.raises(PySparkException) as caught:
            run_query(spark, cluster, stream, source, None, query_name="no_identity")
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert "option checkpointLocation is required for a streaming write" in str(caught.value)
    assert "writerId" in str(caught.value)
