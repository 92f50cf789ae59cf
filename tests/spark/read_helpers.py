"""Helpers of the read-side Spark tests: a real cluster, and streams written without the Spark sink.

Streams are written straight through ``StreamClient``: each ledger is created
for its partition, filled with entries that ``arrow_codec.encode_batch`` made,
closed, and committed (one ``commit_ledgers`` per call), as the sink does.
Rows carry ``(p, seq)``: the partition and a running number within it, so
order and completeness can be checked exactly.
"""
from __future__ import annotations

import itertools
import re
import uuid
from typing import Sequence

import pyarrow as pa

from pyspark_ledger.log.stream_schema import stored_schema
from pyspark_ledger.sandbox import Sandbox
from pyspark_ledger.spark.arrow_codec import encode_batch
from tests.waiting import wait_until as shared_wait_until

PASSWORD = "read-side"
SCHEMA = stored_schema(pa.schema([pa.field("p", pa.int32()), pa.field("seq", pa.int64()),
                                  pa.field("text", pa.string())]))
_batch_ids = itertools.count(1)


def start_sandbox() -> Sandbox:
    """Three real bookie processes on SQLite metadata, every bookie registered."""
    sandbox = Sandbox(bookies=3).start()
    try:
        from pyspark_ledger.spark.executor import ledger_client
        wait_until(lambda: len(ledger_client(sandbox.metadata_uri).bookies(writable_only=True)) >= 3,
                   what="three writable bookies")
    except BaseException:
        sandbox.stop()
        raise
    return sandbox


def unique_stream(request) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_-]+', '-', request.node.name)[:50]}-{uuid.uuid4().hex[:8]}"


def rows_batch(partition: int, first: int, count: int) -> pa.RecordBatch:
    """Rows (partition, first..first+count-1, text) in the stream's stored schema."""
    seqs = list(range(first, first + count))
    return pa.RecordBatch.from_arrays(
        [pa.array([partition] * count, pa.int32()), pa.array(seqs, pa.int64()),
         pa.array([f"p{partition}-row{seq}" for seq in seqs], pa.string())], schema=SCHEMA)


def write_ledger(streams, stream: str, partition: int, batches: Sequence[pa.RecordBatch]) -> int:
    """A closed ledger of the partition holding one entry per batch; its id (not yet committed)."""
    writer = streams.create_ledger(stream, partition)
    futures = [writer.append_async(encode_batch(batch)) for batch in batches]
    for future in futures:
        future.result()
    writer.close()
    return writer.ledger_id


def commit(streams, stream: str, ledgers: dict[int, list[int]]) -> None:
    result = streams.commit_ledgers(stream, "read-tests", next(_batch_ids), ledgers)
    assert result.committed


def append_rows(streams, stream: str, partition: int, first: int, entries: int, rows_per_entry: int) -> int:
    """Commit one new ledger of ``entries`` entries to the partition; returns the next seq."""
    batches = [rows_batch(partition, first + i * rows_per_entry, rows_per_entry) for i in range(entries)]
    commit(streams, stream, {partition: [write_ledger(streams, stream, partition, batches)]})
    return first + entries * rows_per_entry


def three_ledger_stream(request, streams) -> str:
    """A new stream of two partitions: 0 holds ledgers of 4 and 2 entries, 1 one of 3 entries; 5 rows per
    entry (the streaming-read tests' fixture)."""
    name = unique_stream(request)
    streams.create_stream(name, 2, SCHEMA)
    append_rows(streams, name, 0, append_rows(streams, name, 0, 0, 4, 5), 2, 5)
    append_rows(streams, name, 1, 0, 3, 5)
    return name


def read_options(uri: str, stream: str, **options) -> dict[str, str]:
    return {"metadataServiceUri": uri, "stream": stream, "password": PASSWORD,
            **{key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in options.items()}}


def wait_until(predicate, timeout: float = 60.0, what: str = "a condition", interval: float = 0.1):
    """``tests.waiting.wait_until`` with the longer default a Spark query needs."""
    return shared_wait_until(predicate, timeout, what, interval)
