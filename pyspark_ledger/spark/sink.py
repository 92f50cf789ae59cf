"""The ``ledger`` sink's Spark façade: ``batch_writer`` and ``stream_writer`` for ``DefaultSource``.

``df.write.format("ledger")`` (``DataSourceArrowWriter``) and
``df.writeStream.format("ledger")`` (``DataSourceStreamArrowWriter``, or its
stand-in on Spark 4.0: ``compat.stream_arrow_writer_base``) take Arrow
batches. Spark builds the writer on the driver (``plan_sink``: options,
schema check, layout; errors reach the user before any task runs), pickles it
into every task (``sink_task.write_task``: a new ledger per task) and, once
all tasks succeeded, calls ``commit`` on the driver (``sink_commit``: one
compare-and-set appends every task's ledgers, exactly once per writer id and
batch id), or ``abort`` (deletes them).

Exactly once:

- a batch write commits under a writer id of its own (``batch-<uuid>``) and
  batch 0: Spark calls a batch job's ``commit`` once, on the driver, after
  every task succeeded, and never replays it (a failed job leaves nothing; a
  job run again builds a new writer). So the stream does not remember batch
  writers (``remember_writer=False``): their ids would push streaming
  queries' ids out of the ``MAX_WRITERS`` the stream record keeps;
- a streaming write commits micro-batch ``batchId`` under the query's writer
  id (``sink_identity``): a micro-batch Spark replays after a restart, or
  commits again, changes nothing, and its new ledgers are deleted.

Streaming writes append only: ``outputMode("complete")`` (which asks the sink
to overwrite the stream each micro-batch) is refused; Spark itself refuses
``update`` for this sink. ``mode("overwrite")`` of a batch write replaces the
stream's data atomically (``sink_overwrite``). Spark refuses the batch save
modes ``ErrorIfExists`` (its default) and ``Ignore`` for Python data sources
before a writer is asked for, naming Append and Overwrite; so the sink only
ever sees append or overwrite (``tests/spark/test_save_modes.py`` holds Spark,
the sink and the README to that).
"""
from __future__ import annotations

import uuid
from typing import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter

from pyspark_ledger.errors import InvalidConfigurationError, InvalidStateError
from pyspark_ledger.spark.compat import arrow_batches, stream_arrow_writer_base
from pyspark_ledger.spark.options import WriteOptions, parse_write_options
from pyspark_ledger.spark.sink_commit import abort_write, commit_write
from pyspark_ledger.spark.sink_identity import require_writer_identity, streaming_writer_id
from pyspark_ledger.spark.sink_plan import SinkPlan, plan_sink
from pyspark_ledger.spark.sink_task import LedgerCommitMessage, write_task

BATCH_WRITER_PREFIX = "batch-"
BATCH_WRITE_BATCH_ID = 0


def batch_writer(options: Mapping[str, str], schema, overwrite: bool) -> "LedgerBatchWriter":
    """The writer of ``df.write.format("ledger")`` (``DataSource.writer``)."""
    parsed = parse_write_options(options, streaming=False)
    return LedgerBatchWriter(plan_sink(parsed, schema, overwrite=bool(overwrite)))


def stream_writer(options: Mapping[str, str], schema, overwrite: bool) -> "LedgerStreamWriter":
    """The writer of ``df.writeStream.format("ledger")`` (``DataSource.streamWriter``)."""
    parsed = parse_write_options(options, streaming=True)
    if overwrite:
        raise InvalidConfigurationError(
            "a streaming write to format 'ledger' only appends: outputMode('complete') would replace the "
            "stream's data at every micro-batch; use outputMode('append')")
    require_writer_identity(parsed)
    return LedgerStreamWriter(plan_sink(parsed, schema, overwrite=False), parsed)


def _task_partition() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise InvalidStateError("a ledger sink writer's write() runs inside a Spark task; outside "
                                        "Spark, call pyspark_ledger.spark.sink_task.write_task")
    return context.partitionId()


class LedgerBatchWriter(DataSourceArrowWriter):
    """``df.write.format("ledger")``: one ledger per task, one commit per job."""

    def __init__(self, plan: SinkPlan, writer_id: str | None = None) -> None:
        self.plan = plan
        self.writer_id = writer_id or f"{BATCH_WRITER_PREFIX}{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerCommitMessage:
        return write_task(self.plan, iterator, _task_partition())

    def commit(self, messages: Sequence[LedgerCommitMessage | None]) -> None:
        commit_write(self.plan, messages, self.writer_id, BATCH_WRITE_BATCH_ID, remember_writer=False)

    def abort(self, messages: Sequence[LedgerCommitMessage | None]) -> None:
        abort_write(self.plan, messages)


class LedgerStreamWriter(stream_arrow_writer_base()):
    """``df.writeStream.format("ledger")``: one ledger per task, one commit per micro-batch."""

    def __init__(self, plan: SinkPlan, options: WriteOptions) -> None:
        self.plan = plan
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerCommitMessage:
        return write_task(self.plan, arrow_batches(iterator), _task_partition())

    def commit(self, messages: Sequence[LedgerCommitMessage | None], batchId: int) -> None:  # noqa: N803
        commit_write(self.plan, messages, streaming_writer_id(self.options), batchId)

    def abort(self, messages: Sequence[LedgerCommitMessage | None], batchId: int) -> None:  # noqa: N803
        abort_write(self.plan, messages)
