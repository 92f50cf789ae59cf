"""Streaming reads of a ``ledger`` stream: one log position per partition, admission control, AvailableNow.

``spark.readStream.format("ledger")`` makes a ``LedgerStreamReader``. Its
offsets are ``StreamOffset`` JSON: per partition, the log position of the next
entry to read. Spark calls, in its long-lived streaming-source process:

- ``initialOffset()``: startingOffsets resolved against the logs (a new query only;
  a restarted one continues from its checkpoint);
- ``latestOffset(start, limit)``: the end of the next micro-batch. Only confirmed
  entries count (a CLOSED ledger to its last entry, an OPEN one to its last add
  confirmed). ``limit`` is Spark's ``ReadLimit``: ``getDefaultReadLimit`` turns
  maxEntriesPerTrigger into ``ReadMaxRows`` and maxBytesPerTrigger into
  ``ReadMaxBytes``. The row limit counts **entries**, not rows (an entry holds
  up to the writer's rowsPerEntry rows), and the byte limit counts entry bytes
  as stored, estimated from each ledger's mean entry size; only when a single
  entry is larger than maxBytesPerTrigger is a micro-batch over it (it is then
  that one entry, so the query still progresses). When both options are set,
  both caps apply. ``ReadAllAvailable`` (e.g.
  Trigger.Once) reads everything confirmed;
- ``prepareForTriggerAvailableNow()``: pins the current end of every log; later
  micro-batches never pass it, so the query stops once it is read (admission
  control still applies, hence the ``SupportsTriggerAvailableNow`` mixin);
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
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows,
                                              SupportsTriggerAvailableNow)

from pyspark_ledger.log.positions import LogPosition
from pyspark_ledger.spark.batch_reader import (LedgerRangePartition, check_password, entries_per_split, read_partition,
                                               stream_logs)
from pyspark_ledger.spark.offsets import StreamOffset
from pyspark_ledger.spark.options import ReadOptions
from pyspark_ledger.spark.planning import LedgerSpan, PartitionLog, admit, check_offset, plan_ranges, resolve_offsets
from pyspark_ledger.spark.schema import spark_to_arrow_schema

log = logging.getLogger(__name__)


class LedgerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader of ``format("ledger")`` (see the module docstring)."""

    def __init__(self, options: ReadOptions, schema) -> None:
        self.options = options
        self.arrow_schema = spark_to_arrow_schema(schema)
        self._target: StreamOffset | None = None  # the AvailableNow end, in the source process only

    # --- offsets (driver) -----------------------------------------------------------------------
    def initialOffset(self) -> dict:
        logs = self._logs()
        start = resolve_offsets(self.options.starting_offsets, logs)
        return self._checked(start, logs).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_entries_per_trigger is not None:
            return ReadMaxRows(self.options.max_entries_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        logs = self._logs()
        begin = self._checked(StreamOffset.from_json(start), logs)
        if self._target is not None:  # AvailableNow: what came after the target does not exist
            logs = {p: _log_until(partition_log, self._target.get(p, begin[p])) for p, partition_log in logs.items()}
        max_entries, max_bytes = self._limits(limit)
        return admit(begin, logs, max_entries=max_entries, max_bytes=max_bytes).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = StreamOffset.of({partition: partition_log.end
                                        for partition, partition_log in sorted(self._logs().items())})
        log.info("stream %r: Trigger.AvailableNow reads up to %s", self.options.stream,
                 self._target.to_json_string())

    def reportLatestOffset(self) -> dict:
        return StreamOffset.of({partition: partition_log.end
                                for partition, partition_log in sorted(self._logs().items())}).to_json()

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

    def _checked(self, offset: StreamOffset, logs: Mapping[int, PartitionLog]) -> StreamOffset:
        """``offset`` checked for data loss (raises with failOnDataLoss=true, else warns and skips)."""
        checked, losses = check_offset(offset, logs, fail_on_data_loss=self.options.fail_on_data_loss)
        for loss in losses:
            log.warning("stream %r: %s", self.options.stream, loss.message)
        return checked

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        """(max entries, max bytes) of one micro-batch under Spark's ``limit`` and the options."""
        if isinstance(limit, ReadAllAvailable):
            return None, None
        max_entries, max_bytes = self.options.max_entries_per_trigger, self.options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows, max_bytes
        if isinstance(limit, ReadMaxBytes):
            return max_entries, limit.max_bytes
        log.warning("stream %r: read limit %r is not supported; applying maxEntriesPerTrigger/maxBytesPerTrigger",
                    self.options.stream, limit)
        return max_entries, max_bytes


def _log_until(partition_log: PartitionLog, until: LogPosition) -> PartitionLog:
    """The log as if nothing had been added at or after ``until`` (the AvailableNow target).

    Admission control then shares its budget only among entries the query may
    still read. A partition added after the target was pinned is cut at its
    start: it holds only data added later.
    """
    spans = []
    for span in partition_log.spans:
        if span.ledger_seq > until.ledger_seq:
            break
        if span.ledger_seq == until.ledger_seq and span.last_entry_id >= until.entry_id:
            last = until.entry_id - 1
            span = LedgerSpan(span.ledger_seq, span.ledger_id, last, span.bytes_for(last + 1))
        spans.append(span)
    return PartitionLog(tuple(spans), partition_log.next_ledger_seq, partition_log.truncated_end)
