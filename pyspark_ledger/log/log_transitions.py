"""Pure transitions of the stream record: new stream, add a ledger, commit a batch, truncate, delete.

No I/O, no clocks: times come in as arguments. Each function takes a
``StreamRecord`` and returns the next one (or raises); the CAS loop of
``stream_store`` applies it to the freshly read record after a lost
compare-and-set, so every transition is written to be re-applied safely:

- ``add_ledger`` carries the partition's ``next_seq`` the caller fenced, and
  refuses (MetadataVersionConflictError) if a ledger was added since: the
  writer then starts its open again (docs/protocol.md G1);
- ``commit_batch`` returns None when the batch is already committed;
- ``truncate_through`` and ``stamp_sealed`` are keyed by sequence numbers,
  which are never reused, so a second application changes nothing.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

from pyspark_ledger.errors import InvalidArgumentError, MetadataVersionConflictError, NoSuchKeyError
from pyspark_ledger.log.log_metadata import (ACTIVE, DELETING, MAX_WRITERS, LedgerRef, PartitionRecord,
                                             Replication, StreamRecord)
from pyspark_ledger.log.positions import LogPosition


def new_stream(name: str, partitions: int, replication: Replication, schema: bytes | None, uid: str,
               now_ms: int, password_check: str | None = None) -> StreamRecord:
    """The record of a new, empty stream (``password_check``: see ``stream_password``)."""
    return StreamRecord(name=name, uid=uid, ctime_ms=now_ms, replication=replication,
                        partitions=tuple(PartitionRecord() for _ in range(partitions)), schema=schema,
                        password_check=password_check)


def check_active(record: StreamRecord) -> StreamRecord:
    if record.state == DELETING:
        raise NoSuchKeyError(f"stream {record.name!r} is being deleted; call delete_stream({record.name!r}) "
                             "again to finish, then create it anew")
    return record


def add_ledger(record: StreamRecord, partition: int, ledger_id: int,
               expected_next_seq: int) -> tuple[StreamRecord, int]:
    """Append ``ledger_id`` to the partition's log; returns the record and the ledger's sequence number.

    MetadataVersionConflictError if a ledger was added to this partition since the
    caller read it (its ``next_seq`` moved): the caller fenced the wrong tail.
    """
    part = check_active(record).partition(partition)
    if part.next_seq != expected_next_seq:
        raise MetadataVersionConflictError(
            f"the log of partition {partition} of stream {record.name!r} changed: ledger sequence "
            f"{part.next_seq} is next, not {expected_next_seq} (another writer added a ledger)")
    if ledger_id in record.all_ledger_ids() or ledger_id in record.garbage:
        raise InvalidArgumentError(f"ledger {ledger_id} is already part of stream {record.name!r}, or "
                                        "was collected as an orphan")
    grown = replace(part, ledgers=part.ledgers + (LedgerRef(ledger_id),))
    return record.with_partition(partition, grown), part.next_seq


def already_committed(record: StreamRecord, writer_id: str, batch_id: int, ledgers: Mapping[int, tuple[int, ...]],
                      remember_writer: bool = True) -> bool:
    """Whether this commit was made before.

    A remembered writer: its last committed batch is ``batch_id`` or later. A
    writer not remembered (a one-off commit, e.g. a Spark batch write): its
    ledgers -- new ones, written for this commit only -- are all in the logs.
    """
    if remember_writer:
        last = record.last_batch(writer_id)
        return last is not None and batch_id <= last
    ids = [ledger_id for partition_ids in ledgers.values() for ledger_id in partition_ids]
    held = record.all_ledger_ids()
    return bool(ids) and all(ledger_id in held for ledger_id in ids)


def commit_batch(record: StreamRecord, writer_id: str, batch_id: int, ledgers: Mapping[int, tuple[int, ...]],
                 now_ms: int, remember_writer: bool = True) -> StreamRecord | None:
    """Append a batch's closed ledgers to their partitions' logs, once per (writer, batch).

    None if the commit was made before (``already_committed``): nothing to do.
    ``remember_writer=False`` leaves the writers' memory (``MAX_WRITERS`` last
    batch ids) alone: for commits that are never replayed, so that they cannot
    push a streaming query's id out of it.
    """
    check_active(record)
    if already_committed(record, writer_id, batch_id, ledgers, remember_writer):
        return None
    known = record.all_ledger_ids() | set(record.garbage)
    for partition, ids in ledgers.items():
        for ledger_id in ids:
            if ledger_id in known:
                raise InvalidArgumentError(
                    f"ledger {ledger_id} (partition {partition}) is already in stream {record.name!r}, was "
                    "truncated from it or was collected as an orphan (a write job older than the orphan "
                    "sweep's minimum age): commit only new ledgers written for this batch")
    for partition, ids in sorted(ledgers.items()):
        part = record.partition(partition)
        added = tuple(LedgerRef(ledger_id, now_ms) for ledger_id in ids)
        record = record.with_partition(partition, replace(part, ledgers=part.ledgers + added))
    if not remember_writer:
        return record
    writers = tuple(item for item in record.writers if item[0] != writer_id) + ((writer_id, batch_id),)
    return replace(record, writers=writers[-MAX_WRITERS:])


def truncate_through(record: StreamRecord, partition: int, last_seq: int, last_entry_id: int) -> StreamRecord:
    """Drop the partition's ledgers with sequence numbers <= ``last_seq`` (whole ledgers, oldest first).

    ``last_entry_id`` is the last entry of ledger ``last_seq`` (it must be closed);
    the dropped ids move to ``garbage`` until their ledgers are deleted.
    """
    part = record.partition(partition)
    if last_seq < part.first_seq:
        return record
    if last_seq >= part.next_seq:
        raise InvalidArgumentError(
            f"partition {partition} of stream {record.name!r} has no ledger with sequence number {last_seq}")
    keep = last_seq + 1 - part.first_seq
    dropped = tuple(ref.ledger_id for ref in part.ledgers[:keep])
    shrunk = PartitionRecord(first_seq=last_seq + 1, ledgers=part.ledgers[keep:],
                             truncated_end=LogPosition(last_seq, last_entry_id + 1))
    record = record.with_partition(partition, shrunk)
    return replace(record, garbage=record.garbage + tuple(i for i in dropped if i not in record.garbage))


def stamp_sealed(record: StreamRecord, partition: int, sealed: Mapping[int, tuple[int, int]]) -> StreamRecord:
    """Record when ledgers were seen closed: ``{seq: (ledger id, time ms)}``; known stamps are kept."""
    part = record.partition(partition)
    refs = []
    for seq, ref in part.with_seqs():
        stamp = sealed.get(seq)
        if stamp is not None and stamp[0] == ref.ledger_id and ref.sealed_ms == 0:
            ref = LedgerRef(ref.ledger_id, stamp[1])
        refs.append(ref)
    return record.with_partition(partition, replace(part, ledgers=tuple(refs)))


def mark_orphans(record: StreamRecord, ledger_ids: Iterable[int]) -> StreamRecord | None:
    """Move the ledgers among ``ledger_ids`` that no log holds to ``garbage`` (to be deleted).

    Ledgers a log holds now (committed since the caller looked) are left alone;
    None if nothing is left to mark. Once listed as garbage, a ledger can never
    be committed or added to a log (``commit_batch``, ``add_ledger`` refuse it).
    """
    check_active(record)
    known = record.all_ledger_ids() | set(record.garbage)
    marked = tuple(dict.fromkeys(i for i in ledger_ids if i not in known))
    return replace(record, garbage=record.garbage + marked) if marked else None


def forget_garbage(record: StreamRecord, deleted: set[int]) -> StreamRecord:
    """Drop ledgers whose deletion finished from ``garbage``."""
    return replace(record, garbage=tuple(i for i in record.garbage if i not in deleted))


def mark_deleting(record: StreamRecord) -> StreamRecord:
    """DELETING: no more writes or commits; every ledger becomes garbage."""
    every = record.garbage + tuple(i for part in record.partitions for i in part.ledger_ids if i not in record.garbage)
    empty = tuple(PartitionRecord(first_seq=part.next_seq) for part in record.partitions)
    return replace(record, state=DELETING, partitions=empty, garbage=every)


def add_partitions(record: StreamRecord, count: int) -> StreamRecord:
    """Grow the stream to ``count`` partitions (never shrinks)."""
    check_active(record)
    if count < record.partition_count:
        raise InvalidArgumentError(
            f"stream {record.name!r} has {record.partition_count} partitions; they can be added, not removed "
            f"(asked for {count})")
    extra = tuple(PartitionRecord() for _ in range(count - record.partition_count))
    return replace(record, partitions=record.partitions + extra)


def set_schema(record: StreamRecord, schema: bytes, replace_existing: bool = False) -> StreamRecord | None:
    """Store ``schema``; None if it is already the stored one. Refuses to change a schema unless asked."""
    check_active(record)
    if record.schema == schema:
        return None
    if record.schema is not None and not replace_existing:
        raise InvalidArgumentError(
            f"stream {record.name!r} already has a different schema; pass replace=True to change it (readers of "
            "older entries then need to handle both)")
    return replace(record, schema=schema)


__all__ = ["ACTIVE", "add_ledger", "add_partitions", "already_committed", "check_active", "commit_batch",
           "forget_garbage", "mark_deleting", "mark_orphans", "new_stream", "set_schema", "stamp_sealed",
           "truncate_through"]
