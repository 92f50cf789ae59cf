"""``ledger_demo_events``: the demo's Spark streaming source of generated events (``events.py``).

::

    spark.dataSource.register(DemoEventSource)
    df = (spark.readStream.format("ledger_demo_events")
          .option("rowsPerBatch", 100000).option("partitions", 2).option("stopFile", "/tmp/x/stop")
          .load())

Every micro-batch gets the next ``rowsPerBatch`` event ids, split into
``partitions`` contiguous ranges (one Spark task each). The offset is
``{"next_id": N, "ts_us": T}``: the ids emitted so far and the time the batch
was planned (the rows' ``ts``), so a batch Spark replays holds the very same
rows. Once the file ``stopFile`` exists, no new batch is planned: the query
finishes the batch it is in and then idles, and the demo can stop it without
interrupting a write. Unlike Spark's rate sources, the ids a query emitted up
to batch ``b`` are then exactly ``0 .. next_id - 1`` of batch ``b``'s end offset.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from pyspark_ledger.demo.events import EVENT_SCHEMA_DDL, event_batches
from pyspark_ledger.errors import InvalidConfigurationError

NAME = "ledger_demo_events"
DEFAULT_ROWS_PER_BATCH = 100_000
DEFAULT_PARTITIONS = 2
ARROW_BATCH_ROWS = 8192
NEXT_ID, TS_US = "next_id", "ts_us"


@dataclass(frozen=True)
class EventRange(InputPartition):
    """Events ``first_id .. end_id - 1`` of one task, stamped ``ts_us``."""

    first_id: int
    end_id: int
    ts_us: int


def now_us() -> int:
    return time.time_ns() // 1000


def split_range(first_id: int, end_id: int, parts: int, ts_us: int) -> list[EventRange]:
    """``first_id .. end_id - 1`` as up to ``parts`` contiguous, non-empty ranges of near-equal size."""
    total = end_id - first_id
    if total <= 0:
        return []
    parts = min(parts, total)
    bounds = [first_id + total * index // parts for index in range(parts + 1)]
    return [EventRange(bounds[i], bounds[i + 1], ts_us) for i in range(parts)]


def _positive_option(options, name: str, default: int) -> int:
    raw = options.get(name.lower(), options.get(name))
    if raw is None:
        return default
    text = str(raw).strip()
    if not text.isdigit() or int(text) < 1:
        raise InvalidConfigurationError(f"option {name}={raw!r} of format '{NAME}' is invalid: expected a whole "
                                        "number >= 1")
    return int(text)


class DemoEventSource(DataSource):
    """The streaming source ``format("ledger_demo_events")`` (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return EVENT_SCHEMA_DDL

    def streamReader(self, schema) -> "DemoEventReader":
        options = self.options
        return DemoEventReader(_positive_option(options, "rowsPerBatch", DEFAULT_ROWS_PER_BATCH),
                               _positive_option(options, "partitions", DEFAULT_PARTITIONS),
                               options.get("stopfile", options.get("stopFile")))


class DemoEventReader(DataSourceStreamReader):
    """Plans ``rows_per_batch`` new events per micro-batch until ``stop_file`` exists."""

    def __init__(self, rows_per_batch: int, partitions: int, stop_file: str | None) -> None:
        self.rows_per_batch = rows_per_batch
        self.partition_count = partitions
        self.stop_file = stop_file

    def initialOffset(self) -> dict:
        return {NEXT_ID: 0, TS_US: now_us()}

    def latestOffset(self, start: dict, limit) -> dict:
        if self.stop_file and os.path.exists(self.stop_file):
            return start
        rows = self.rows_per_batch
        max_rows = getattr(limit, "max_rows", None)
        if isinstance(max_rows, int) and max_rows > 0:
            rows = min(rows, max_rows)
        return {NEXT_ID: int(start[NEXT_ID]) + rows, TS_US: now_us()}

    def partitions(self, start: dict, end: dict) -> Sequence[EventRange]:
        return split_range(int(start[NEXT_ID]), int(end[NEXT_ID]), self.partition_count, int(end[TS_US]))

    def read(self, partition: EventRange) -> Iterator[pa.RecordBatch]:
        yield from event_batches(partition.first_id, partition.end_id, partition.ts_us, ARROW_BATCH_ROWS)

    def commit(self, end: dict) -> None:
        """Nothing to release: events are generated, not buffered."""
