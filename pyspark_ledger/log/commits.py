"""Exactly-once commits of closed ledgers into a stream's partition logs (the Spark sink's commit).

Writer tasks write their Arrow batches into NEW ledgers they own and close;
the driver then calls ``commit_ledgers(stream, writer_id, batch_id,
{partition: [ledger ids]})``, which appends every ledger to its partition's
log in ONE compare-and-set of the stream record, together with the writer's
new last batch id. A replayed or retried batch (same writer, a batch id not
above the last committed one) changes nothing and reports ALREADY_COMMITTED,
so the sink may then discard the retry's own ledgers with ``abort_ledgers``,
which never deletes a ledger a log holds. Within a partition, ledgers are
read in the order they were committed. The ledgers are checked (they exist
and are CLOSED) after each read of the record the commit compare-and-sets on,
which makes commits safe against a concurrent orphan sweep (``orphans``).
A commit needs the stream's password (``stream_password``), checked before
and again on the record the compare-and-set expects.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from pyspark_ledger.errors import InvalidArgumentError, InvalidStateError
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.inputs import check_batch_id, check_ledger_ids, check_writer_id
from pyspark_ledger.log.ledgers import STREAM_TAG, delete_ledgers
from pyspark_ledger.log.log_metadata import StreamRecord
from pyspark_ledger.log.log_transitions import already_committed, check_active, commit_batch
from pyspark_ledger.log.stream_password import check_record, verify_password
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
                   ledgers: Mapping[int, Sequence[int]], *, remember_writer: bool = True) -> CommitResult:
    """Append closed ledgers to partition logs once per (writer_id, batch_id); see the module docstring.

    ``remember_writer=False`` is for a commit that is never replayed (a Spark
    batch write, whose writer id is new each time): it records no batch id, so
    it takes no place among the ``MAX_WRITERS`` writers a stream remembers; the
    ledgers, new for this commit, keep it once-only (ledgers the logs hold
    already are never committed again).

    InvalidArgumentError for a bad partition, an id listed twice, a ledger that
    belongs to another stream or is already in the stream; InvalidStateError for
    a ledger that is not CLOSED; NoSuchLedgerError for an unknown ledger.
    """
    writer_id, batch_id = check_writer_id(writer_id), check_batch_id(batch_id)
    record = check_active(verify_password(ctx, stream, write=True))
    checked = check_ledger_ids(ledgers, record.partition_count, stream)
    if not remember_writer and not any(checked.values()):
        return CommitResult(COMMITTED, batch_id)  # nothing to append and nothing to remember
    if already_committed(record, writer_id, batch_id, checked, remember_writer):
        return CommitResult(ALREADY_COMMITTED, batch_id)
    now_ms = ctx.now_ms()
    stored, changed = update_stream(ctx.store, stream, lambda current: checked_commit(
        ctx, current, writer_id, batch_id, checked, now_ms, remember_writer))
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
            raise InvalidArgumentError(f"{ledger_id!r} is not a ledger id")
    record = read_stream(ctx.store, stream).value
    kept = record.all_ledger_ids() | set(record.garbage)
    held = sorted(set(ids) & kept)
    if held:
        log.warning("stream %r: not deleting ledgers %s, the stream's logs hold them", stream, held)
    return delete_ledgers(ctx.client, [ledger_id for ledger_id in ids if ledger_id not in kept], ctx.password)


def checked_commit(ctx: LogContext, record: StreamRecord, writer_id: str, batch_id: int,
                   ledgers: Mapping[int, tuple[int, ...]], now_ms: int,
                   remember_writer: bool = True) -> StreamRecord | None:
    """``commit_batch`` on the record just read, then a check that its ledgers exist and are CLOSED.

    The check runs after the read whose version the compare-and-set expects, so
    an orphan sweep (``orphans``) cannot delete a ledger between the check and
    the commit: it would have to change the record first.
    """
    check_record(ctx, record)  # the stream may have been created anew, with another password
    after = commit_batch(record, writer_id, batch_id, ledgers, now_ms, remember_writer)
    if after is not None:
        check_closed(ctx, record.name, (ledger_id for ids in ledgers.values() for ledger_id in ids))
    return after


def check_closed(ctx: LogContext, stream: str, ledger_ids: Iterable[int]) -> None:
    """Raise unless every ledger exists, is CLOSED and, if tagged, was created for ``stream``."""
    for ledger_id in ledger_ids:
        metadata = ctx.client.ledger_metadata(ledger_id)
        if not metadata.is_closed:
            raise InvalidStateError(
                f"ledger {ledger_id} is {metadata.state}, not CLOSED: close its writer before committing it")
        tag = metadata.custom_metadata.get(STREAM_TAG)
        if tag is not None and tag != stream.encode():
            raise InvalidArgumentError(
                f"ledger {ledger_id} was created for stream {tag.decode(errors='replace')!r}, not {stream!r}")
