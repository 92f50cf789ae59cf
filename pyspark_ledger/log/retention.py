"""Retention: truncate whole ledgers from the front of partition logs, then delete them.

Ledgers can only be deleted whole (docs/protocol.md G3), and only a
prefix of CLOSED ledgers is ever truncated: truncation stops at the first
ledger that is open or still needed. Three policies:

- ``truncate_before(position)``: ledgers whose every entry lies before the position;
- ``truncate_older_than(max_age_s)``: ledgers sealed more than ``max_age_s`` ago. A
  ledger's seal time is a time it was known CLOSED (set by a commit, or by the
  first retention pass that sees it closed), so every entry in it is older than
  that: no entry younger than ``max_age_s`` is ever deleted, and a ledger is
  deleted at most one retention pass later than strictly necessary;
- ``truncate_all``: every ledger (Spark's ``overwrite``); open ledgers are fenced
  first, so a writer still appending to them fails instead of writing into a
  deleted ledger.

Each truncation is one compare-and-set of the stream record that moves the
ledgers to its ``garbage`` list; ``collect_garbage`` then deletes them and
forgets them by a second compare-and-set. A crash in between leaves them listed,
and the next retention call deletes them: no ledger is ever orphaned, and none
is deleted while a log still lists it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.log.context import LogContext
from pyspark_ledger.log.inputs import check_partition
from pyspark_ledger.log.ledgers import delete_ledgers, fence_ledgers
from pyspark_ledger.log.log_metadata import StreamRecord
from pyspark_ledger.log.log_transitions import check_active, forget_garbage, stamp_sealed, truncate_through
from pyspark_ledger.log.log_views import ledger_end
from pyspark_ledger.log.positions import parse_position
from pyspark_ledger.log.stream_store import read_stream, update_stream


@dataclass(frozen=True, slots=True)
class Cut:
    """Truncate a partition through ledger ``last_seq`` (closed at ``last_entry_id``)."""

    last_seq: int
    last_entry_id: int


@dataclass(frozen=True, slots=True)
class TruncationResult:
    """The ledgers truncated away per partition (oldest first) and the ids deleted from the store."""

    truncated: Mapping[int, tuple[int, ...]]
    deleted: frozenset[int]


def truncate_before(ctx: LogContext, stream: str, partition: int, position) -> TruncationResult:
    """Truncate the partition's closed ledgers whose every entry is before ``position``."""
    position = parse_position(position, what="truncation position")
    if position.is_sentinel:
        raise InvalidArgumentError(f"truncate_before needs a concrete position, not {position}: use "
                                        "truncate_all to drop everything")
    record = check_active(read_stream(ctx.store, stream).value)
    check_partition(partition, record.partition_count, stream)
    cut = None
    for seq, ref in record.partition(partition).with_seqs():
        end = ledger_end(ctx, ref.ledger_id)
        before = seq < position.ledger_seq or (seq == position.ledger_seq and end.last_entry_id < position.entry_id)
        if not end.closed or not before:
            break
        cut = Cut(seq, end.last_entry_id)
    return _apply(ctx, stream, record, {partition: cut} if cut else {}, {})


def truncate_older_than(ctx: LogContext, stream: str, max_age_s: float,
                        partitions: Iterable[int] | None = None) -> TruncationResult:
    """Truncate closed ledgers sealed at least ``max_age_s`` ago (seal unknown ledgers now)."""
    if isinstance(max_age_s, bool) or not isinstance(max_age_s, (int, float)) or max_age_s < 0:
        raise InvalidArgumentError(f"max_age_s must be a number of seconds >= 0, got {max_age_s!r}")
    record = check_active(read_stream(ctx.store, stream).value)
    chosen = range(record.partition_count) if partitions is None else \
        [check_partition(p, record.partition_count, stream) for p in partitions]
    now_ms, max_age_ms = ctx.now_ms(), int(max_age_s * 1000)
    cuts: dict[int, Cut] = {}
    stamps: dict[int, dict[int, tuple[int, int]]] = {}
    for partition in chosen:
        old = True
        for seq, ref in record.partition(partition).with_seqs():
            end = ledger_end(ctx, ref.ledger_id)
            if not end.closed:
                break
            if ref.sealed_ms == 0:
                stamps.setdefault(partition, {})[seq] = (ref.ledger_id, now_ms)
            old = old and ref.sealed_ms > 0 and now_ms - ref.sealed_ms >= max_age_ms
            if old:
                cuts[partition] = Cut(seq, end.last_entry_id)
    return _apply(ctx, stream, record, cuts, stamps)


def truncate_all(ctx: LogContext, stream: str) -> TruncationResult:
    """Truncate every ledger of every partition, fencing open ones first (Spark's overwrite)."""
    record = check_active(read_stream(ctx.store, stream).value)
    return _apply(ctx, stream, record, log_ends(ctx, record), {})


def log_ends(ctx: LogContext, record: StreamRecord) -> dict[int, Cut]:
    """Where each non-empty partition's log ends now (its open ledgers fenced and closed first)."""
    cuts = {}
    for partition, part in enumerate(record.partitions):
        if not part.ledgers:
            continue
        ends = {ref.ledger_id: ledger_end(ctx, ref.ledger_id) for ref in part.ledgers}
        open_ids = [ledger_id for ledger_id, end in ends.items() if not end.closed]
        closed = fence_ledgers(ctx.client, open_ids, ctx.password)
        last = part.ledgers[-1].ledger_id
        last_entry = closed[last].last_entry_id if last in closed else ends[last].last_entry_id
        cuts[partition] = Cut(part.next_seq - 1, last_entry)
    return cuts


def collect_garbage(ctx: LogContext, stream: str) -> frozenset[int]:
    """Delete the ledgers truncated from the stream's logs and forget them; the ids deleted."""
    garbage = read_stream(ctx.store, stream).value.garbage
    if not garbage:
        return frozenset()
    deleted = delete_ledgers(ctx.client, garbage, ctx.password)
    update_stream(ctx.store, stream, lambda current: forget_garbage(current, deleted)
                  if set(current.garbage) & deleted else None)
    return frozenset(deleted)


def _apply(ctx: LogContext, stream: str, record: StreamRecord, cuts: Mapping[int, Cut],
           stamps: Mapping[int, Mapping[int, tuple[int, int]]]) -> TruncationResult:
    truncated = {p: tuple(ref.ledger_id for seq, ref in record.partition(p).with_seqs() if seq <= cut.last_seq)
                 for p, cut in cuts.items()}
    if cuts or stamps:
        update_stream(ctx.store, stream, lambda current: _cut(current, cuts, stamps))
    return TruncationResult(truncated, collect_garbage(ctx, stream))


def _cut(record: StreamRecord, cuts: Mapping[int, Cut],
         stamps: Mapping[int, Mapping[int, tuple[int, int]]]) -> StreamRecord:
    check_active(record)
    for partition, sealed in stamps.items():
        record = stamp_sealed(record, partition, sealed)
    for partition, cut in cuts.items():
        record = truncate_through(record, partition, cut.last_seq, cut.last_entry_id)
    return record


__all__ = ["Cut", "TruncationResult", "collect_garbage", "log_ends", "truncate_all", "truncate_before",
           "truncate_older_than"]
