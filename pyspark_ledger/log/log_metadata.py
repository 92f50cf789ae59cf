"""The stream record: one versioned JSON value per stream holding its layout and every partition's log.

A stream's partitions are logs of ledgers (docs/protocol.md, section G). The
metadata store offers compare-and-set per key only, so everything a commit
across partitions must change atomically lives in ONE key,
``streams/<name>``: the replication settings, the Arrow schema (bytes), each
partition's ledger list, the last committed batch of each writer (exactly-once
commits) and the ledgers truncated away but not yet deleted (``garbage``).

Compact JSON form (``format`` 1)::

    {"format":1,"name":"orders","uid":"9f..","ctime_ms":1700000000000,"state":"ACTIVE",
     "replication":{"ensemble_size":3,"write_quorum":3,"ack_quorum":2,"digest":"crc32c"},
     "schema":"<base64>"|null,
     "partitions":[{"first":4,"ledgers":[[17,0],[23,1700000000500]],"truncated_end":[3,120]}],
     "writers":[["query-1",41]], "garbage":[12], "password_check":"sha256$<salt>$<digest>"}

Each ledger of a partition is ``[ledger id, sealed_ms]``; its sequence number is
``first`` + its index, so sequence numbers are consecutive, start at 0 and are
never reused (truncation raises ``first``). ``sealed_ms`` is a time at which the
ledger was known CLOSED (0: not yet known); age-based retention uses it, since
every entry of the ledger is older than that. ``truncated_end`` is the end slot
of the newest ledger truncated away.

``password_check`` is a salted hash of the password the stream's ledgers are
written with (``stream_password``), never the password itself. Records written
before streams kept one have no such field: it decodes as None, "no check
yet", and ``stream_password`` records one on first use.

Size: the store refuses values over 1,000,000 bytes (ZooKeeper's znode limit).
A ledger costs at most 36 bytes here (19-digit id and a millisecond time), so a
stream holds about 27,000 ledgers across all its partitions in the worst case
(about 50,000 with the short ids of the SQLite store); retention keeps the
count bounded, and ``encode`` refuses a record over the limit with a clear
error. At most ``MAX_WRITERS`` writers' last batch ids are kept (the oldest
commits are forgotten first).
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace
from typing import Any

from pyspark_ledger.errors import MetadataError
from pyspark_ledger.log.positions import LogPosition
from pyspark_ledger.metadata.names import MAX_VALUE_BYTES

FORMAT_VERSION = 1
ACTIVE = "ACTIVE"
DELETING = "DELETING"
STATES = (ACTIVE, DELETING)
MAX_RECORD_BYTES = MAX_VALUE_BYTES
MAX_WRITERS = 1000
STREAMS_ROOT = "streams"


def stream_key(name: str) -> str:
    """The metadata key of a stream's record."""
    return f"{STREAMS_ROOT}/{name}"


@dataclass(frozen=True, slots=True)
class Replication:
    """How the ledgers of a stream are replicated (E, Qw, Qa) and digested."""

    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    digest: str = "crc32c"


@dataclass(frozen=True, slots=True)
class LedgerRef:
    """One ledger of a log: its id and when it was known closed (0: not yet known)."""

    ledger_id: int
    sealed_ms: int = 0


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """One partition's log: ledgers oldest first, the first one's sequence number ``first_seq``."""

    first_seq: int = 0
    ledgers: tuple[LedgerRef, ...] = ()
    truncated_end: LogPosition | None = None

    @property
    def next_seq(self) -> int:
        """The sequence number the next ledger added to this log gets."""
        return self.first_seq + len(self.ledgers)

    @property
    def ledger_ids(self) -> tuple[int, ...]:
        return tuple(ref.ledger_id for ref in self.ledgers)

    def seq_of(self, ledger_id: int) -> int | None:
        for index, ref in enumerate(self.ledgers):
            if ref.ledger_id == ledger_id:
                return self.first_seq + index
        return None

    def ledger_at(self, seq: int) -> LedgerRef | None:
        """The ledger with sequence number ``seq``, or None if truncated away or not yet added."""
        index = seq - self.first_seq
        return self.ledgers[index] if 0 <= index < len(self.ledgers) else None

    def with_seqs(self) -> list[tuple[int, LedgerRef]]:
        """(sequence number, ledger) pairs, oldest first."""
        return [(self.first_seq + index, ref) for index, ref in enumerate(self.ledgers)]


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """Everything stored about one stream (see the module docstring)."""

    name: str
    uid: str
    ctime_ms: int
    replication: Replication
    partitions: tuple[PartitionRecord, ...]
    schema: bytes | None = None
    writers: tuple[tuple[str, int], ...] = ()
    garbage: tuple[int, ...] = ()
    state: str = ACTIVE
    password_check: str | None = None  # see ``stream_password``; None: an old record, no check yet

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    def partition(self, partition: int) -> PartitionRecord:
        return self.partitions[partition]

    def with_partition(self, partition: int, record: PartitionRecord) -> "StreamRecord":
        partitions = list(self.partitions)
        partitions[partition] = record
        return replace(self, partitions=tuple(partitions))

    def last_batch(self, writer_id: str) -> int | None:
        for known, batch_id in self.writers:
            if known == writer_id:
                return batch_id
        return None

    def all_ledger_ids(self) -> set[int]:
        """Every ledger id in any partition's log."""
        return {ref.ledger_id for part in self.partitions for ref in part.ledgers}


# --- JSON ---------------------------------------------------------------------------


def encode(record: StreamRecord) -> bytes:
    """The compact JSON form; MetadataError if it exceeds what the store can hold."""
    doc = {
        "format": FORMAT_VERSION, "name": record.name, "uid": record.uid, "ctime_ms": record.ctime_ms,
        "state": record.state, "replication": _replication_doc(record.replication),
        "schema": None if record.schema is None else base64.b64encode(record.schema).decode("ascii"),
        "partitions": [_partition_doc(part) for part in record.partitions],
        "writers": [[writer, batch] for writer, batch in record.writers],
        "garbage": list(record.garbage),
    }
    if record.password_check is not None:
        doc["password_check"] = record.password_check
    data = json.dumps(doc, separators=(",", ":")).encode()
    if len(data) > MAX_RECORD_BYTES:
        ledgers = sum(len(part.ledgers) for part in record.partitions)
        raise MetadataError(
            f"stream {record.name!r} would need a record of {len(data)} bytes for its {ledgers} ledgers, over "
            f"the metadata store's limit of {MAX_RECORD_BYTES}: truncate old ledgers (retention) or roll "
            "ledgers less often")
    return data


def decode(data: bytes, name: str) -> StreamRecord:
    """The record stored under ``streams/<name>``; MetadataError naming the stream if unreadable."""
    try:
        doc = json.loads(data)
        if doc.get("format") != FORMAT_VERSION:
            raise ValueError(f"unsupported record format {doc.get('format')!r}")
        record = StreamRecord(
            name=str(doc["name"]), uid=str(doc["uid"]), ctime_ms=int(doc["ctime_ms"]), state=str(doc["state"]),
            replication=Replication(**doc["replication"]),
            schema=None if doc["schema"] is None else base64.b64decode(doc["schema"], validate=True),
            partitions=tuple(_partition_from(item) for item in doc["partitions"]),
            writers=tuple((str(writer), int(batch)) for writer, batch in doc["writers"]),
            garbage=tuple(int(ledger_id) for ledger_id in doc["garbage"]),
            password_check=_optional_text(doc.get("password_check")))
        if record.state not in STATES:
            raise ValueError(f"unknown stream state {record.state!r}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MetadataError(f"the record of stream {name!r} is unreadable ({len(data)} bytes): {exc!r}") from exc
    return record


def _optional_text(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"password_check must be a string, got {type(value).__name__}")
    return value


def _replication_doc(replication: Replication) -> dict[str, Any]:
    return {"ensemble_size": replication.ensemble_size, "write_quorum": replication.write_quorum,
            "ack_quorum": replication.ack_quorum, "digest": replication.digest}


def _partition_doc(part: PartitionRecord) -> dict[str, Any]:
    end = part.truncated_end
    return {"first": part.first_seq, "ledgers": [[ref.ledger_id, ref.sealed_ms] for ref in part.ledgers],
            "truncated_end": None if end is None else [end.ledger_seq, end.entry_id]}


def _partition_from(doc: dict[str, Any]) -> PartitionRecord:
    end = doc["truncated_end"]
    refs = tuple(LedgerRef(int(ledger_id), int(sealed)) for ledger_id, sealed in doc["ledgers"])
    return PartitionRecord(first_seq=int(doc["first"]), ledgers=refs,
                           truncated_end=None if end is None else LogPosition(int(end[0]), int(end[1])))


__all__ = ["ACTIVE", "DELETING", "LedgerRef", "MAX_RECORD_BYTES", "MAX_WRITERS", "PartitionRecord", "Replication",
           "StreamRecord", "decode", "encode", "stream_key"]
