"""Logs of ledgers: streams, their partitions, and positions in a log.

Pure building blocks (``positions``, ``log_metadata``, ``log_transitions``,
``inputs``, ``log_spans``) import neither gRPC nor pyarrow; ``stream_schema``,
the codec of a stream's stored Arrow schema, imports pyarrow only. The log
layer proper builds on the replication client and is loaded on first use of
its names:

* ``stream_client.StreamClient`` -- the façade: streams, writers, readers, commits, retention
* ``streams`` -- the stream registry (create/open/list/delete, schema, partitions)
* ``log_writer`` -- the single writer of a partition (fence, create, CAS; roll; close)
* ``log_reader`` -- reading a partition across ledgers from a position
* ``log_views`` -- partition logs as ``log_spans.PartitionLog`` values, for read planning
* ``commits`` -- exactly-once commits of closed ledgers (the Spark sink)
* ``retention`` -- truncation by position, by age, of everything; garbage collection
* ``orphans`` -- finding and deleting ledgers of a stream that no log references
"""
from __future__ import annotations

from pyspark_ledger.log.positions import EARLIEST, LATEST, LogPosition, parse_position

_LAZY = {
    "StreamClient": "pyspark_ledger.log.stream_client",
    "StreamInfo": "pyspark_ledger.log.streams",
    "LogWriter": "pyspark_ledger.log.log_writer",
    "RollPolicy": "pyspark_ledger.log.log_writer",
    "LogReader": "pyspark_ledger.log.log_reader",
    "LogEntry": "pyspark_ledger.log.log_reader",
    "CommitResult": "pyspark_ledger.log.commits",
    "TruncationResult": "pyspark_ledger.log.retention",
    "OrphanSweep": "pyspark_ledger.log.orphans",
    "Replication": "pyspark_ledger.log.log_metadata",
}

__all__ = ["EARLIEST", "LATEST", "LogPosition", "parse_position", *sorted(_LAZY)]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pyspark_ledger.log' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(module), name)
