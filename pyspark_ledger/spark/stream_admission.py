"""Streaming reads with admission control and Trigger.AvailableNow (Spark 4.2+).

``AdmissionControlledStreamReader`` is the ``stream_reader.LedgerStreamReader``
with the API Spark 4.2 added for Python stream readers (``compat`` picks it
when ``pyspark.sql.streaming.datasource`` exists). Spark chooses this API by
the signature of ``latestOffset`` and calls, in its streaming-source process:

- ``latestOffset(start, limit)``: the end of the next micro-batch. Only confirmed
  entries count (a CLOSED ledger to its last entry, an OPEN one to its last add
  confirmed). ``limit`` is Spark's ``ReadLimit``: ``getDefaultReadLimit`` turns
  maxEntriesPerTrigger into ``ReadMaxRows`` and maxBytesPerTrigger into
  ``ReadMaxBytes``. The row limit counts **entries**, not rows (an entry holds
  up to the writer's rowsPerEntry rows), and the byte limit counts entry bytes
  as stored, estimated from each ledger's mean entry size; only when a single
  entry is larger than maxBytesPerTrigger is a micro-batch over it (it is then
  that one entry, so the query still progresses). When both options are set,
  both caps apply. ``ReadAllAvailable`` (e.g. Trigger.Once) reads everything
  confirmed;
- ``prepareForTriggerAvailableNow()``: pins the current end of every log; later
  micro-batches never pass it, so the query stops once it is read (admission
  control still applies, hence the ``SupportsTriggerAvailableNow`` mixin).
"""
from __future__ import annotations

import logging

from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows,
                                              SupportsTriggerAvailableNow)

from pyspark_ledger.log.log_spans import LedgerSpan, PartitionLog
from pyspark_ledger.log.positions import LogPosition
from pyspark_ledger.spark.offsets import StreamOffset
from pyspark_ledger.spark.options import ReadOptions
from pyspark_ledger.spark.planning import admit
from pyspark_ledger.spark.stream_reader import LedgerStreamReader

log = logging.getLogger(__name__)


class AdmissionControlledStreamReader(LedgerStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader of ``format("ledger")`` on Spark 4.2+ (see the module docstring)."""

    def __init__(self, options: ReadOptions, schema) -> None:
        super().__init__(options, schema)
        self._target: StreamOffset | None = None  # the AvailableNow end, in the source process only

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_entries_per_trigger is not None:
            return ReadMaxRows(self.options.max_entries_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # type: ignore[override]
        logs = self._logs()
        begin = self._checked(StreamOffset.from_json(start), logs)
        if self._target is not None:  # AvailableNow: what came after the target does not exist
            logs = {p: _log_until(partition_log, self._target.get(p, begin[p])) for p, partition_log in logs.items()}
        max_entries, max_bytes = self._limits(limit)
        return admit(begin, logs, max_entries=max_entries, max_bytes=max_bytes).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._log_ends()
        log.info("stream %r: Trigger.AvailableNow reads up to %s", self.options.stream,
                 self._target.to_json_string())

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
