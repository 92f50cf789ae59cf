"""Validation of what callers hand the log layer: stream names, partitions, writer and batch ids, schemas.

Every check returns the value (normalised) or raises InvalidArgumentError
saying what is wrong and what is accepted; ``check_replication`` raises
InvalidConfigurationError, as replication settings are configuration. The Spark
layer checks its options itself, naming them, before it calls the log layer.
Stream names follow the rule of the Spark ``stream`` option
(``pyspark_ledger.spark.options``) so that any stream the log layer creates can
be named there.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from pyspark_ledger.entry import check_digest_type
from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.log.log_metadata import Replication
from pyspark_ledger.metadata.model import check_quorums

MAX_PARTITIONS = 1024
MAX_WRITER_ID_CHARS = 200
MAX_BATCH_ID = 2**63 - 1
_STREAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}", re.ASCII)
STREAM_NAME_RULE = "1-200 letters, digits, '.', '_' or '-', starting with a letter or digit (e.g. 'orders')"


def check_stream_name(name: Any) -> str:
    if not isinstance(name, str) or not _STREAM_NAME.fullmatch(name):
        raise InvalidArgumentError(f"stream name {name!r} is invalid: use {STREAM_NAME_RULE}")
    return name


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_partition_count(count: Any) -> int:
    if not _is_int(count) or not 1 <= count <= MAX_PARTITIONS:
        raise InvalidArgumentError(
            f"a stream's partition count must be an integer from 1 to {MAX_PARTITIONS}, got {count!r}")
    return count


def check_partition(partition: Any, count: int, stream: str) -> int:
    """A partition number of a stream with ``count`` partitions."""
    if not _is_int(partition) or not 0 <= partition < count:
        raise InvalidArgumentError(
            f"stream {stream!r} has partitions 0..{count - 1}; partition {partition!r} does not exist")
    return partition


def check_writer_id(writer_id: Any) -> str:
    """A writer (Spark query or job) id: printable text of 1-200 characters."""
    if not isinstance(writer_id, str) or not 0 < len(writer_id) <= MAX_WRITER_ID_CHARS \
            or not writer_id.isprintable() or writer_id != writer_id.strip():
        raise InvalidArgumentError(
            f"writer id {writer_id!r} is invalid: use 1-{MAX_WRITER_ID_CHARS} printable characters without "
            "surrounding spaces (e.g. a Spark query id)")
    return writer_id


def check_batch_id(batch_id: Any) -> int:
    if not _is_int(batch_id) or not 0 <= batch_id <= MAX_BATCH_ID:
        raise InvalidArgumentError(f"batch id must be an integer >= 0, got {batch_id!r}")
    return batch_id


def check_replication(ensemble_size: Any, write_quorum: Any, ack_quorum: Any, digest: Any) -> Replication:
    check_quorums(ensemble_size, write_quorum, ack_quorum)
    return Replication(ensemble_size, write_quorum, ack_quorum, check_digest_type(digest))


def check_schema(schema: Any) -> bytes | None:
    """None, the stored schema bytes, or a ``pyarrow.Schema`` (encoded with ``encode_stream_schema``)."""
    if schema is None:
        return None
    if isinstance(schema, (bytes, bytearray, memoryview)):
        if not schema:
            raise InvalidArgumentError("a stream schema must not be empty bytes: pass None for no schema")
        return bytes(schema)
    if type(schema).__module__.startswith("pyarrow") and type(schema).__name__ == "Schema":
        from pyspark_ledger.log.stream_schema import encode_stream_schema
        return encode_stream_schema(schema)
    raise InvalidArgumentError(
        f"a stream schema must be a pyarrow.Schema or the bytes of encode_stream_schema(), got "
        f"{type(schema).__name__}")


def check_ledger_ids(ledgers: Any, count: int, stream: str) -> dict[int, tuple[int, ...]]:
    """``{partition: [ledger ids]}`` checked: partitions exist, ids are ints, no id twice."""
    if not isinstance(ledgers, Mapping):
        raise InvalidArgumentError(
            f"ledgers to commit must be a mapping of partition -> list of ledger ids, got {type(ledgers).__name__}")
    seen: set[int] = set()
    checked: dict[int, tuple[int, ...]] = {}
    for partition, ids in sorted(ledgers.items(), key=lambda item: str(item[0])):
        check_partition(partition, count, stream)
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise InvalidArgumentError(f"partition {partition}: expected a list of ledger ids, got {ids!r}")
        ids = tuple(ids)
        for ledger_id in ids:
            if not _is_int(ledger_id) or ledger_id < 0:
                raise InvalidArgumentError(f"partition {partition}: {ledger_id!r} is not a ledger id")
            if ledger_id in seen:
                raise InvalidArgumentError(f"ledger {ledger_id} is listed twice in one commit")
            seen.add(ledger_id)
        checked[partition] = ids
    return checked
