"""An in-memory Arrow Python Data Source: the ceiling of Spark's Python Data Source path.

``format("arrow_memory")`` reads rows that exist only in the Python worker's
memory (no storage, no network), handed to Spark as Arrow record batches, and
writes by counting the Arrow batches Spark hands over. Whatever the ``ledger``
source achieves, it cannot beat these figures on the same machine, so
``bench/spark_io.py`` measures them in the same run as its baseline.

Read options: ``rows`` (total, default 1,000,000), ``partitions`` (default 2),
``rowsPerBatch`` (default 10,000), ``payloadBytes`` (default 100),
``payloadType`` (``binary``, the default, or ``string``). The schema is
``id bigint not null, payload binary not null`` (or ``payload string not
null``, the schema of a source that reads strings); ids are 0..rows-1.
Write option: ``resultPath``: where ``commit`` writes ``{"rows": n, "batches": m}``.

Run it alone for its own figures (JSON on stdout)::

    python bench/arrow_memory_source.py --rows 2000000
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader,
                                    InputPartition, WriterCommitMessage)

NAME = "arrow_memory"
PAYLOAD_TYPES = {"binary": pa.binary(), "string": pa.string()}
DEFAULTS = {"rows": 1_000_000, "partitions": 2, "rowsperbatch": 10_000, "payloadbytes": 100}


def _payload_type(options) -> str:
    name = str(options.get("payloadtype", "binary")).lower()
    if name not in PAYLOAD_TYPES:
        raise ValueError(f"option payloadType={name!r} of format '{NAME}' must be one of {sorted(PAYLOAD_TYPES)}")
    return name


def schema_ddl(payload_type: str = "binary") -> str:
    return f"id bigint not null, payload {payload_type} not null"


def arrow_schema(payload_type: str = "binary") -> pa.Schema:
    return pa.schema([pa.field("id", pa.int64(), nullable=False),
                      pa.field("payload", PAYLOAD_TYPES[payload_type], nullable=False)])


SCHEMA_DDL = schema_ddl()
ARROW_SCHEMA = arrow_schema()


def _int_option(options, name: str) -> int:
    raw = options.get(name, DEFAULTS[name])
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = -1
    if value < 0 or (value == 0 and name != "rows"):
        raise ValueError(f"option {name}={raw!r} of format '{NAME}' must be a positive whole number")
    return value


class RowRange(InputPartition):
    """Rows first..end-1 of the data set."""

    def __init__(self, first: int, end: int) -> None:
        super().__init__((first, end))
        self.first, self.end = first, end


class ArrowMemoryReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.rows = _int_option(options, "rows")
        self.partition_count = _int_option(options, "partitions")
        self.rows_per_batch = _int_option(options, "rowsperbatch")
        self.payload_bytes = _int_option(options, "payloadbytes")
        self.schema = arrow_schema(_payload_type(options))

    def partitions(self):
        bounds = np.linspace(0, self.rows, self.partition_count + 1).astype(np.int64)
        return [RowRange(int(first), int(end)) for first, end in zip(bounds, bounds[1:])]

    def read(self, partition: RowRange):
        """Yield batches that share one payload column; only the ids are computed per batch."""
        size = min(self.rows_per_batch, max(partition.end - partition.first, 1))
        payload_type = self.schema.field("payload").type
        payload = _payload_column(size, self.payload_bytes, payload_type)
        for first in range(partition.first, partition.end, self.rows_per_batch):
            rows = min(self.rows_per_batch, partition.end - first)
            ids = pa.array(np.arange(first, first + rows, dtype=np.int64))
            yield pa.RecordBatch.from_arrays([ids, payload.slice(0, rows)], schema=self.schema)


def _payload_column(rows: int, payload_bytes: int, payload_type: pa.DataType = pa.binary()) -> pa.Array:
    data = pa.py_buffer(b"\x5a" * (rows * payload_bytes))
    offsets = pa.py_buffer(np.arange(0, (rows + 1) * payload_bytes, payload_bytes, dtype=np.int32).tobytes())
    return pa.Array.from_buffers(payload_type, rows, [None, offsets, data])


@dataclass
class CountMessage(WriterCommitMessage):
    rows: int
    batches: int


class ArrowCountingWriter(DataSourceArrowWriter):
    def __init__(self, options) -> None:
        self.result_path = options.get("resultpath", "")

    def write(self, iterator):
        rows = batches = 0
        for batch in iterator:
            rows += batch.num_rows
            batches += 1
        return CountMessage(rows, batches)

    def commit(self, messages) -> None:
        if self.result_path:
            totals = {"rows": sum(m.rows for m in messages), "batches": sum(m.batches for m in messages)}
            with open(self.result_path, "w", encoding="utf-8") as out:
                json.dump(totals, out)


class ArrowMemorySource(DataSource):
    """``format("arrow_memory")``: rows made in memory; writes counted, not stored."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return schema_ddl(_payload_type(self.options))

    def reader(self, schema):
        return ArrowMemoryReader(self.options)

    def writer(self, schema, overwrite: bool):
        return ArrowCountingWriter(self.options)


def register(spark) -> None:
    """Make ``format("arrow_memory")`` available in ``spark`` (workers get the class by value)."""
    from pyspark_ledger.testing.spark import register_data_source

    register_data_source(spark, ArrowMemorySource)


def measure(spark, rows: int, partitions: int = 2, rows_per_batch: int = 10_000,
            payload_bytes: int = 100, result_path: str = "") -> dict:
    """Read ``rows`` rows through Spark (a no-op sink) and write them back; rows/s of each."""
    options = {"rows": rows, "partitions": partitions, "rowsPerBatch": rows_per_batch,
               "payloadBytes": payload_bytes}
    frame = spark.read.format(NAME).options(**options).load()
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    read_seconds = time.perf_counter() - started
    started = time.perf_counter()
    frame.write.format(NAME).mode("append").option("resultPath", result_path).save()
    write_seconds = time.perf_counter() - started
    return {"rows": rows, "partitions": partitions, "rows_per_batch": rows_per_batch,
            "payload_bytes": payload_bytes,
            "read_rows_per_s": round(rows / read_seconds), "read_seconds": round(read_seconds, 3),
            "read_then_write_rows_per_s": round(rows / write_seconds),
            "read_then_write_seconds": round(write_seconds, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--payload-bytes", type=int, default=100)
    args = parser.parse_args(argv)
    from pyspark_ledger.testing.spark import local_spark_session, stop_spark_session

    spark = local_spark_session("arrow-memory-bench")
    try:
        register(spark)
        measure(spark, min(args.rows, 100_000), args.partitions)  # warm up the Python workers
        figures = measure(spark, args.rows, args.partitions, args.rows_per_batch, args.payload_bytes)
    finally:
        stop_spark_session(spark)
    figures["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    json.dump(figures, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
