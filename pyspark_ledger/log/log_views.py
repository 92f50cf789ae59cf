"""What a partition's log holds now, as ``log_spans.PartitionLog`` values for read planning.

For each ledger of the log, oldest first: a CLOSED ledger is readable to its
last entry and its byte length comes from its metadata; an OPEN (or
IN_RECOVERY) ledger is readable to its last add confirmed, read without
fencing. The spans stop at the first ledger that is not closed: entries of a
later ledger may only be read once every earlier ledger is closed, or a
reader would skip the entries the open ledger still gets (during a roll, the
previous ledger is closed right after the new one is added).

An open ledger's byte length is not known to readers; it is estimated from
the mean entry size of the partition's closed ledgers (0 if there is none).
Ends of closed ledgers never change and are cached in the ``cache`` dict the
caller owns.

A ledger whose metadata is gone while the stream's record, read again, still
lists it was not truncated away (truncation takes a ledger out of the record
before deleting it) but deleted by hand: it is *lost*. Its span says so
(``LedgerSpan.lost``, no readable entry) and the spans go on with the next
ledger; readers then fail naming it, or skip its range (failOnDataLoss).
"""
from __future__ import annotations

from typing import MutableMapping

from pyspark_ledger.errors import MetadataError, NoSuchKeyError, NoSuchLedgerError
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.ledgers import LedgerEnd, readable_end
from pyspark_ledger.log.log_metadata import StreamRecord
from pyspark_ledger.log.log_spans import LedgerSpan, PartitionLog
from pyspark_ledger.log.stream_password import verify_password
from pyspark_ledger.log.stream_store import read_stream
from pyspark_ledger.metadata.update_loop import RetryPolicy

#: the record is read again when a ledger it lists was deleted meanwhile (truncated away)
VIEW_RETRY = RetryPolicy(attempts=5)
MAX_CACHED_ENDS = 100_000
EndCache = MutableMapping[int, LedgerEnd]


def partition_logs(ctx: LogContext, stream: str, cache: EndCache | None = None, *,
                   retry: RetryPolicy = VIEW_RETRY) -> dict[int, PartitionLog]:
    """Every partition's log (partition -> PartitionLog), read consistently with one record.

    If a ledger is deleted under the reading (retention truncated it), the record is read again,
    as ``retry`` allows. UnauthorizedError if the password is not the stream's (``stream_password``).
    """
    verify_password(ctx, stream, write=False)
    for _ in retry.tries():
        record = read_stream(ctx.store, stream).value
        try:
            return {partition: partition_log(ctx, record, partition, cache)
                    for partition in range(record.partition_count)}
        except NoSuchLedgerError:
            continue
    raise MetadataError(f"the ledgers of stream {stream!r} kept being deleted while its logs were read "
                        f"({retry.attempts} attempts)")


def partition_log(ctx: LogContext, record: StreamRecord, partition: int,
                  cache: EndCache | None = None) -> PartitionLog:
    """One partition's log as of ``record`` (NoSuchLedgerError if one of its ledgers is gone)."""
    part = record.partition(partition)
    spans: list[LedgerSpan] = []
    for seq, ref in part.with_seqs():
        try:
            end = ledger_end(ctx, ref.ledger_id, cache)
        except NoSuchLedgerError:
            if not is_lost(ctx, record, partition, ref.ledger_id):
                raise  # truncated away meanwhile: the caller reads the record again
            spans.append(LedgerSpan(seq, ref.ledger_id, -1, 0, lost=True))
            continue
        length = end.length if end.closed else _estimate(spans, end.last_entry_id + 1)
        spans.append(LedgerSpan(seq, ref.ledger_id, end.last_entry_id, length))
        if not end.closed:
            break
    return PartitionLog(tuple(spans), next_ledger_seq=part.next_seq, truncated_end=part.truncated_end)


def is_lost(ctx: LogContext, record: StreamRecord, partition: int, ledger_id: int) -> bool:
    """Whether a ledger found gone is still in the partition's log of the stream's record as stored now
    (same incarnation): then it was deleted under the stream, not truncated away."""
    try:
        current = read_stream(ctx.store, record.name).value
    except NoSuchKeyError:
        return False
    return (current.uid == record.uid and partition < current.partition_count
            and current.partition(partition).seq_of(ledger_id) is not None)


def ledger_end(ctx: LogContext, ledger_id: int, cache: EndCache | None = None) -> LedgerEnd:
    """The readable end of one ledger, from ``cache`` once it is closed."""
    if cache is not None and ledger_id in cache:
        return cache[ledger_id]
    end = readable_end(ctx.client, ledger_id, ctx.password)
    if cache is not None and end.closed:
        if len(cache) >= MAX_CACHED_ENDS:
            cache.clear()
        cache[ledger_id] = end
    return end


def _estimate(closed: list[LedgerSpan], entries: int) -> int:
    count = sum(span.entry_count for span in closed)
    size = sum(span.length for span in closed)
    return size * entries // count if count else 0
