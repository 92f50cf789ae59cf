"""A write task that fails once and is retried by Spark: no row lost, none duplicated, no orphan (docs/protocol.md S1).

Spark retries a failed task only when the master allows it (``local[N,F]``:
F attempts); the shared test session runs ``local[2]`` (no retry), and one
JVM holds one SparkContext. So the scenarios run in a child process with a
session of its own on ``local[2,2]``: this file is also that child's
program (``python -m tests.spark.test_write_retry <metadata uri> <dir>``).

The failure is injected by a data source registered only in the child,
``ledger_fail_once``: the ledger sink's own writers, whose ``write`` is fed an
iterator that raises after the first Arrow batch in the first attempt of
task 1, i.e. after the sink created its ledger and appended to it. The
parent then reads the streams back with ``StreamClient`` and the Arrow codec,
and counts the ledgers: the SQLite store numbers ledgers 0, 1, 2, ..., so
each id below the highest that no longer exists is a ledger that was deleted
(one per failed attempt).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark.sql.datasource")

from pyspark_ledger.spark.sink import LedgerBatchWriter, LedgerStreamWriter  # noqa: E402
from pyspark_ledger.spark.source import DefaultSource  # noqa: E402

pytestmark = pytest.mark.spark
PASSWORD = "retry"
BATCH_STREAM, STREAMING_STREAM = "retried-batch", "retried-stream"
BATCH_ROWS, FILES, ROWS_PER_FILE = 3000, 3, 60
FAILING_TASK = 1
CHILD_TIMEOUT_S = 280
REPO_ROOT = Path(__file__).resolve().parents[2]


# --- the child: a Spark session with retries, and a sink that fails once per task 1 -----------------------------


def _fail_first_attempt(batches):
    """Yield the first batch, then fail, in the first attempt of task FAILING_TASK; else pass through."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context.attemptNumber() > 0 or context.partitionId() != FAILING_TASK:
        yield from batches
        return
    for batch in batches:
        yield batch
        break
    raise RuntimeError("injected failure of the first attempt of a write task")


class FailOnceBatchWriter(LedgerBatchWriter):
    def write(self, iterator):
        return super().write(_fail_first_attempt(iterator))


class FailOnceStreamWriter(LedgerStreamWriter):
    def write(self, iterator):
        return super().write(_fail_first_attempt(iterator))


class FailOnceSource(DefaultSource):
    @classmethod
    def name(cls) -> str:
        return "ledger_fail_once"

    def writer(self, schema, overwrite):
        return FailOnceBatchWriter(super().writer(schema, overwrite).plan)

    def streamWriter(self, schema, overwrite):
        made = super().streamWriter(schema, overwrite)
        return FailOnceStreamWriter(made.plan, made.options)


def child_main(uri: str, workdir: Path) -> None:
    from pyspark.sql import SparkSession

    from pyspark_ledger.testing.spark import DEFAULT_CONF, register_data_source

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.master(f"local[2,{FAILING_TASK + 1}]").appName("ledger-write-retry")
    for key, value in {**DEFAULT_CONF, "spark.sql.warehouse.dir": str(workdir / "warehouse")}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        register_data_source(spark, FailOnceSource)
        options = {"metadataServiceUri": uri, "password": PASSWORD, "rowsPerEntry": "100"}
        (spark.range(0, BATCH_ROWS, numPartitions=3).selectExpr("id", "cast(id AS string) AS name")
         .write.format("ledger_fail_once").mode("append").options(**options).save(BATCH_STREAM))
        source = workdir / "in"
        source.mkdir()
        for number in range(FILES):
            ids = range(number * ROWS_PER_FILE, (number + 1) * ROWS_PER_FILE)
            lines = "".join(json.dumps({"id": i, "name": str(i)}) + "\n" for i in ids)
            (source / f"f{number}.json").write_text(lines)
        frame = (spark.readStream.schema("id bigint, name string").option("maxFilesPerTrigger", 1)
                 .json(str(source)).repartition(2))
        query = (frame.writeStream.format("ledger_fail_once").options(**options).option("stream", STREAMING_STREAM)
                 .option("rowsPerEntry", "10")  # task 1 gets ~30 rows a micro-batch: its ledger exists when it fails
                 .option("checkpointLocation", str(workdir / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            raise query.exception()
    finally:
        spark.stop()


# --- the parent: run the child, then check the streams --------------------------------------------------------


def read_ids(streams, stream: str) -> list[int]:
    from pyspark_ledger.spark.arrow_codec import decode_batch

    ids = []
    for partition in range(streams.open_stream(stream).partitions):
        for entry in streams.open_reader(stream, partition).entries():
            ids += decode_batch(entry.data).column("id").to_pylist()
    return ids


def test_failed_attempts_are_retried_without_duplicates_or_orphans(cluster, tmp_path):
    from pyspark_ledger.log.stream_store import read_stream
    from pyspark_ledger.spark import executor

    child = subprocess.run([sys.executable, "-m", "tests.spark.test_write_retry", cluster.metadata_uri,
                            str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=CHILD_TIMEOUT_S)
    assert child.returncode == 0, child.stderr[-4000:]
    assert "injected failure of the first attempt" in child.stderr

    streams = executor.stream_client(cluster.metadata_uri, PASSWORD)
    assert sorted(read_ids(streams, BATCH_STREAM)) == list(range(BATCH_ROWS))
    assert sorted(read_ids(streams, STREAMING_STREAM)) == list(range(FILES * ROWS_PER_FILE))

    held = set()
    for name in (BATCH_STREAM, STREAMING_STREAM):
        held |= read_stream(streams.context.store, name).value.all_ledger_ids()
    existing = set(streams.client.list_ledgers())
    assert existing == held, "every ledger left is in a stream's log"
    deleted = set(range(max(existing) + 1)) - existing
    assert len(deleted) == 1 + FILES, "one ledger per failed attempt was created, then deleted"


if __name__ == "__main__":
    child_main(sys.argv[1], Path(sys.argv[2]))
