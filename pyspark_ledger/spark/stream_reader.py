"""Streaming reads of a ``ledger`` stream: one log position per partition, on every Spark 4.

``spark.readStream.format("ledger")`` makes a ``LedgerStreamReader`` on Spark
4.0/4.1 and its subclass ``stream_admission.AdmissionControlledStreamReader``
(admission control, Trigger.AvailableNow) on Spark 4.2+; ``compat`` picks.
Offsets are ``StreamOffset`` JSON: per partition, the log position of the next
entry to read. Spark calls, in its long-lived streaming-source process:

- ``initialOffset()``: startingOffsets resolved against the logs (a new query only;
  a restarted one continues from its checkpoint);
- ``latestOffset()``: the end of the next micro-batch, here every confirmed
  entry (a CLOSED ledger to its last entry, an OPEN one to its last add
  confirmed). Spark 4.0/4.1 call it so; under Trigger.AvailableNow they pin
  the first answer as the end of the query themselves;
- ``partitions(start, end)``: the entry ranges between two offsets, cut like
  the batch reader's; ``read()`` decodes them on executors (``batch_reader``).

A checkpointed position the log no longer holds (truncated by retention or
overwrite, or the stream was recreated) is data loss: with failOnDataLoss=true
(the default) the query fails with a message naming the option; with false it
continues from where the log now starts and logs a warning. Partitions added
to the stream while the query runs are read from their start.

Nothing is held between calls that a pickled copy would need: the reader sent
to executors carries only its options and schema. ``stop()`` is not relied on;
clients belong to the process (``executor``).
"""
from __future__ import annotations

import logging
from typing import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from pyspark_ledger.log.log_spans import PartitionLog
from pyspark_ledger.spark.batch_reader import (LedgerRangePartition, check_password, entries_per_split, read_partition,
                                               skip_lost, stream_logs)
from pyspark_ledger.spark.offsets import StreamOffset
from pyspark_ledger.spark.options import ReadOptions
from pyspark_ledger.spark.planning import check_offset, plan_ranges, resolve_offsets
from pyspark_ledger.spark.schema import spark_to_arrow_schema

log = logging.getLogger(__name__)


class LedgerStreamReader(DataSourceStreamReader):
    """The streaming reader of ``format("ledger")`` (see the module docstring)."""

    def __init__(self, options: ReadOptions, schema) -> None:
        self.options = options
        self.arrow_schema = spark_to_arrow_schema(schema)

    # --- offsets (driver) -----------------------------------------------------------------------
    def initialOffset(self) -> dict:
        logs = self._logs()
        start = resolve_offsets(self.options.starting_offsets, logs)
        return self._checked(start, logs).to_json()

    def latestOffset(self) -> dict:
        return self.reportLatestOffset()

    def reportLatestOffset(self) -> dict:
        return self._log_ends().to_json()

    def partitions(self, start: dict, end: dict) -> list[LedgerRangePartition]:
        logs = self._logs()
        begin = self._checked(StreamOffset.from_json(start), logs)
        stop = StreamOffset.from_json(end)
        ranges = []
        for partition, position in begin.items():
            until = stop.get(partition, position)
            if until <= position:
                continue
            partition_log = logs[partition]
            skip_lost(self.options, partition, position, until, partition_log)
            ranges += plan_ranges(partition, position, until, partition_log,
                                  max_entries_per_range=entries_per_split(partition_log))
        check_password(self.options, ranges)
        return [LedgerRangePartition(item) for item in ranges]

    def commit(self, end: dict) -> None:
        """Nothing to release: entries stay until retention removes them."""

    # --- reading (executors) ----------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, self.arrow_schema, partition)

    # --- internals ----------------------------------------------------------------------------------
    def _logs(self) -> dict[int, PartitionLog]:
        return stream_logs(self.options)

    def _log_ends(self) -> StreamOffset:
        """Every partition's log up to its last confirmed entry."""
        return StreamOffset.of({partition: partition_log.end
                                for partition, partition_log in sorted(self._logs().items())})

    def _checked(self, offset: StreamOffset, logs: Mapping[int, PartitionLog]) -> StreamOffset:
        """``offset`` checked for data loss (raises with failOnDataLoss=true, else warns and skips)."""
        checked, losses = check_offset(offset, logs, fail_on_data_loss=self.options.fail_on_data_loss)
        for loss in losses:
            log.warning("stream %r: %s", self.options.stream, loss.message)
        return checked
