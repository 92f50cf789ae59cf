"""``mode("overwrite")``: truncate every partition and append the new ledgers in ONE compare-and-set.

A reader never sees the stream empty nor the old and new data together: the
stream record changes once, from the old logs to the new ledgers alone.

1. Read the record; if the writer committed this batch already, stop (replay).
2. For each partition holding ledgers, find where its log ends: the last
   ledger's last entry, fencing (recovery-open) any ledger still open so that
   a writer appending to it fails instead of writing into a deleted ledger,
   as ``retention.truncate_all`` does.
3. CAS the record with, for every partition, ``truncate_through`` its last
   ledger, then ``commit_batch`` of the new ledgers (checked to exist and be
   CLOSED after the read the CAS expects, as ``commits`` does). If a partition's log
   grew since step 2 (another writer committed), the CAS is not made and the
   steps start again (as ``OVERWRITE_RETRY`` allows), so no data committed
   before the overwrite survives it.
4. Delete the truncated ledgers (``retention.collect_garbage``; if that
   fails, the next retention pass deletes them: they stay listed as garbage).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

from pyspark_ledger.errors import LedgerError, MetadataError, MetadataVersionConflictError
from pyspark_ledger.log.commits import ALREADY_COMMITTED, COMMITTED, CommitResult, check_closed
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.inputs import check_batch_id, check_ledger_ids, check_writer_id
from pyspark_ledger.log.log_metadata import StreamRecord
from pyspark_ledger.log.log_transitions import already_committed, check_active, commit_batch, truncate_through
from pyspark_ledger.log.retention import Cut, collect_garbage, log_ends
from pyspark_ledger.log.stream_password import check_record, verify_password
from pyspark_ledger.log.stream_store import read_stream, update_stream
from pyspark_ledger.metadata.update_loop import RetryPolicy

log = logging.getLogger(__name__)
#: the overwrite starts again when a log grew after its end was read (another writer committed)
OVERWRITE_RETRY = RetryPolicy(attempts=10)


@dataclass(frozen=True)
class Replacement:
    """What replaces the stream's data: a writer's batch of new ledgers per partition."""

    writer_id: str
    batch_id: int
    ledgers: Mapping[int, tuple[int, ...]]
    remember_writer: bool = True  # False: a one-off commit (see ``commits.commit_ledgers``)

    def already_in(self, record: StreamRecord) -> bool:
        return already_committed(record, self.writer_id, self.batch_id, self.ledgers, self.remember_writer)


def commit_replacing(ctx: LogContext, stream: str, writer_id: str, batch_id: int,
                     ledgers: Mapping[int, Sequence[int]], *, remember_writer: bool = True,
                     retry: RetryPolicy = OVERWRITE_RETRY) -> CommitResult:
    """Replace every partition's log by ``ledgers`` at once; see the module docstring."""
    writer_id, batch_id = check_writer_id(writer_id), check_batch_id(batch_id)
    verify_password(ctx, stream, write=True)
    for _ in retry.tries():
        record = check_active(read_stream(ctx.store, stream).value)
        batch = Replacement(writer_id, batch_id, check_ledger_ids(ledgers, record.partition_count, stream),
                            remember_writer)
        if batch.already_in(record):
            return CommitResult(ALREADY_COMMITTED, batch_id)
        cuts = log_ends(ctx, record)
        now_ms = ctx.now_ms()
        try:
            _, changed = update_stream(ctx.store, stream, lambda current: _checked_replace(
                ctx, current, cuts, batch, now_ms))
        except MetadataVersionConflictError:
            continue  # a log grew after its end was read: read the ends again
        if not changed:
            return CommitResult(ALREADY_COMMITTED, batch_id)
        _collect(ctx, stream)
        log.info("stream %r: writer %r replaced the stream's data with batch %d", stream, writer_id, batch_id)
        return CommitResult(COMMITTED, batch_id)
    raise MetadataError(f"stream {stream!r} kept growing while it was being overwritten ({retry.attempts} "
                        "attempts): stop its other writers, then overwrite it")




def _replace(record: StreamRecord, cuts: Mapping[int, Cut], batch: Replacement, now_ms: int) -> StreamRecord | None:
    """The pure transition: truncate every log at its end read before, then commit the batch."""
    check_active(record)
    if batch.already_in(record):
        return None
    for partition, part in enumerate(record.partitions):
        cut = cuts.get(partition)
        if part.ledgers and (cut is None or part.next_seq != cut.last_seq + 1):
            raise MetadataVersionConflictError(
                f"the log of partition {partition} of stream {record.name!r} grew while it was being overwritten")
    for partition, cut in cuts.items():
        record = truncate_through(record, partition, cut.last_seq, cut.last_entry_id)
    return commit_batch(record, batch.writer_id, batch.batch_id, batch.ledgers, now_ms, batch.remember_writer)


def _checked_replace(ctx: LogContext, record: StreamRecord, cuts: Mapping[int, Cut], batch: Replacement,
                     now_ms: int) -> StreamRecord | None:
    """``_replace``, then the new ledgers checked (exist, CLOSED) after the read the CAS expects."""
    check_record(ctx, record)  # the stream may have been created anew, with another password
    after = _replace(record, cuts, batch, now_ms)
    if after is not None:
        check_closed(ctx, record.name, (ledger_id for ids in batch.ledgers.values() for ledger_id in ids))
    return after


def _collect(ctx: LogContext, stream: str) -> None:
    try:
        collect_garbage(ctx, stream)
    except LedgerError:
        log.warning("stream %r: deleting the overwritten ledgers failed; the next retention pass deletes them",
                    stream, exc_info=True)
