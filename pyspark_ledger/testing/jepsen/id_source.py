"""``jepsen_ids``: a streaming source of unique ids for the Spark fault run (``spark_run.py``).

::

    spark.dataSource.register(IdSource)
    df = (spark.readStream.format("jepsen_ids").option("rowsPerBatch", 50).option("partitions", 2)
          .option("stopFile", "/tmp/x/stop").load())      # columns: id long, payload string

Each micro-batch plans the next ``rowsPerBatch`` ids; the offset is ``{"next_id": N}``, the ids planned so
far, so a batch Spark replays from its offset log holds the very same rows (``payload`` is a function of
the id). Once ``stopFile`` exists no new batch is planned. The ids a query wrote up to batch ``b`` are
therefore ``0 .. next_id - 1`` of ``<checkpoint>/offsets/<b>`` (``emitted``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from pyspark_ledger.errors import InvalidConfigurationError, LedgerError

NAME = "jepsen_ids"
SCHEMA = "id long, payload string"
NEXT_ID = "next_id"
MAX_ROWS_PER_BATCH = 1_000_000
MAX_PARTITIONS = 64


@dataclass(frozen=True)
class IdRange(InputPartition):
    first: int
    end: int


def payload(row_id: int) -> str:
    return f"row-{row_id:012d}"


def _bounded(options, name: str, default: int, limit: int) -> int:
    raw = options.get(name.lower(), options.get(name, default))
    text = str(raw).strip()
    if not text.isdigit() or not 1 <= int(text) <= limit:
        raise InvalidConfigurationError(f"option {name}={raw!r} of format '{NAME}' must be a whole number in 1..{limit}")
    return int(text)


class IdSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> "IdReader":
        options = self.options
        return IdReader(_bounded(options, "rowsPerBatch", 50, MAX_ROWS_PER_BATCH),
                        _bounded(options, "partitions", 2, MAX_PARTITIONS), options.get("stopfile"))


class IdReader(DataSourceStreamReader):
    def __init__(self, rows_per_batch: int, partitions: int, stop_file: str | None) -> None:
        self.rows_per_batch, self.partition_count, self.stop_file = rows_per_batch, partitions, stop_file

    def initialOffset(self) -> dict:
        return {NEXT_ID: 0}

    def latestOffset(self, start: dict, limit) -> dict:
        if self.stop_file and os.path.exists(self.stop_file):
            return start
        return {NEXT_ID: int(start[NEXT_ID]) + self.rows_per_batch}

    def partitions(self, start: dict, end: dict) -> Sequence[IdRange]:
        first, end_id = int(start[NEXT_ID]), int(end[NEXT_ID])
        total = end_id - first
        parts = max(1, min(self.partition_count, total))
        bounds = [first + total * index // parts for index in range(parts + 1)]
        return [IdRange(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i] < bounds[i + 1]]

    def read(self, partition: IdRange) -> Iterator[tuple[int, str]]:
        for row_id in range(partition.first, partition.end):
            yield row_id, payload(row_id)

    def commit(self, end: dict) -> None:
        """Nothing to release: the ids are computed."""


def emitted(checkpoint: str | os.PathLike, batch: int | None) -> int:
    """How many ids the query planned up to the end of ``batch`` (0 for None), from its offset log."""
    if batch is None:
        return 0
    path = Path(checkpoint) / "offsets" / str(batch)
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        return int(json.loads(lines[-1])[NEXT_ID])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise LedgerError(f"cannot tell which ids batch {batch} held: {path} is unreadable ({exc})") from exc
