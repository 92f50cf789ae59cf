"""Exactly-once commits of closed ledgers into a stream's partition logs (the Spark sink's commit).

Writer tasks write their Arrow batches into NEW ledgers they own and close;
the driver then calls ``commit_ledgers(stream, writer_id, batch_id,
{partition: [ledger ids]})``, which appends every ledger to its partition's
log in ONE compare-and-set of the stream record, together with the writer's
new last batch id. A replayed or retried batch (same writer, a batch id not
above the last committed one) changes nothing and reports ALREADY_COMMITTED,
so the sink may then discard the retry's own ledgers with ``abort_ledgers``,
which never deletes a ledger a log holds. Within a partition, ledgers are
read in the order they were committed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.inputs import check_batch_id, check_ledger_ids, check_writer_id
from pyspark_ledger.log.ledgers import STREAM_TAG, delete_ledgers
from pyspark_ledger.log.log_metadata import StreamRecord
from pyspark_ledger.log.log_transitions import check_active, commit_batch
from pyspark_ledger.log.stream_store import read_stream, update_stream

log = logging.getLogger(__name__)
COMMITTED = "committed"
ALREADY_COMMITTED = "already committed"


@dataclass(frozen=True, slots=True)
class CommitResult:
    """COMMITTED (with each partition's new ledger sequence numbers) or ALREADY_COMMITTED (a no-op)."""

    status: str
    batch_id: int
    ledger_seqs: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def committed(self) -> bool:
        """True if this call appended the ledgers; False if the batch had been committed before."""
        return self.status == COMMITTED


def commit_ledgers(ctx: LogContext, stream: str, writer_id: str, batch_id: int,
                   ledgers: Mapping[int, Sequence[int]]) -> CommitResult:
    """Append closed ledgers to partition logs once per (writer_id, batch_id); see the module docstring.

    InvalidConfigurationError for a bad partition, an id listed twice, a ledger that
    is not CLOSED, belongs to another stream or is already in the stream;
    NoSuchLedgerError for an unknown ledger.
    """
    writer_id, batch_id = check_writer_id(writer_id), check_batch_id(batch_id)
    record = check_active(read_stream(ctx.store, stream).value)
    checked = check_ledger_ids(ledgers, record.partition_count, stream)
    if _already(record, writer_id, batch_id):
        return CommitResult(ALREADY_COMMITTED, batch_id)
    _check_closed(ctx, stream, (ledger_id for ids in checked.values() for ledger_id in ids))
    now_ms = ctx.now_ms()
    stored, changed = update_stream(ctx.store, stream,
                                    lambda current: commit_batch(current, writer_id, batch_id, checked, now_ms))
    if not changed:
        return CommitResult(ALREADY_COMMITTED, batch_id)
    seqs = {partition: tuple(stored.value.partition(partition).seq_of(i) for i in ids)
            for partition, ids in checked.items()}
    log.info("stream %r: writer %r committed batch %d (%d ledgers)", stream, writer_id, batch_id,
             sum(len(ids) for ids in checked.values()))
    return CommitResult(COMMITTED, batch_id, seqs)


def last_committed_batch(ctx: LogContext, stream: str, writer_id: str) -> int | None:
    """The highest batch id ``writer_id`` committed to ``stream``; None if none (or forgotten)."""
    return read_stream(ctx.store, stream).value.last_batch(check_writer_id(writer_id))


def abort_ledgers(ctx: LogContext, stream: str, ledger_ids: Iterable[int]) -> set[int]:
    """Delete a failed or duplicate batch's ledgers; those a log of the stream holds are kept.

    Returns the ids deleted (or already gone).
    """
    ids = tuple(ledger_ids)
    for ledger_id in ids:
        if isinstance(ledger_id, bool) or not isinstance(ledger_id, int) or ledger_id < 0:
            raise InvalidConfigurationError(f"{ledger_id!r} is not a ledger id")
    record = read_stream(ctx.store, stream).value
    kept = record.all_ledger_ids() | set(record.garbage)
    held = sorted(set(ids) & kept)
    if held:
        log.warning("stream %r: not deleting ledgers %s, the stream's logs hold them", stream, held)
    return delete_ledgers(ctx.client, [ledger_id for ledger_id in ids if ledger_id not in kept])


def _already(record: StreamRecord, writer_id: str, batch_id: int) -> bool:
    last = record.last_batch(writer_id)
    return last is not None and batch_id <= last


def _check_closed(ctx: LogContext, stream: str, ledger_ids: Iterable[int]) -> None:
    for ledger_id in ledger_ids:
        metadata = ctx.client.ledger_metadata(ledger_id)
        if not metadata.is_closed:
            raise InvalidConfigurationError(
                f"ledger {ledger_id} is {metadata.state}, not CLOSED: close its writer before committing it")
        tag = metadata.custom_metadata.get(STREAM_TAG)
        if tag is not None and tag != stream.encode():
            raise InvalidConfigurationError(
                f"ledger {ledger_id} was created for stream {tag.decode(errors='replace')!r}, not {stream!r}")
