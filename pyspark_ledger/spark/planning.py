"""Read planning over partition logs: resolve offsets, detect data loss, admit, split.

Pure arithmetic on what the log layer reports about each partition (a
``log.log_spans.PartitionLog``: its ledgers' sequence numbers, ids, last
readable entries and byte lengths); no I/O. The Spark readers call it to turn
options and offsets into the entry ranges their input partitions read:

- ``resolve`` / ``resolve_offsets``: EARLIEST/LATEST sentinels (startingOffsets,
  endingOffsets) to concrete positions of the logs;
- ``check_position`` / ``check_offset``: a checkpointed position the log no longer
  holds (truncated, or the stream was recreated) is data loss: an error naming
  failOnDataLoss, or, when that option is false, where to continue and a warning;
- ``admit``: the end offset of a micro-batch under maxEntriesPerTrigger /
  maxBytesPerTrigger, the budget shared across partitions by their backlog;
- ``plan_ranges``: the entries between two positions, one range per ledger,
  split so that no range exceeds a size (one Spark input partition each).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pyspark_ledger.errors import DataLossError, InvalidArgumentError
from pyspark_ledger.log.log_spans import LedgerSpan, PartitionLog
from pyspark_ledger.log.positions import LogPosition
from pyspark_ledger.spark.offsets import OffsetSpec, StreamOffset


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Entries first..last (inclusive) of one ledger, read for one stream partition."""

    partition: int
    ledger_seq: int
    ledger_id: int
    first_entry_id: int
    last_entry_id: int

    @property
    def entry_count(self) -> int:
        return self.last_entry_id - self.first_entry_id + 1


@dataclass(frozen=True, slots=True)
class DataLoss:
    """A position the log no longer holds, where to continue, and the warning to log."""

    partition: int
    lost_from: LogPosition
    resume_at: LogPosition
    message: str


def resolve(position: LogPosition, log: PartitionLog) -> LogPosition:
    """EARLIEST -> the log's start, LATEST -> its end; concrete positions unchanged."""
    if position.is_earliest:
        return log.start
    if position.is_latest:
        return log.end
    return position


def resolve_offsets(spec: OffsetSpec, logs: Mapping[int, PartitionLog]) -> StreamOffset:
    """startingOffsets / endingOffsets made concrete for partitions 0..len(logs)-1."""
    spec.check_partitions(len(logs))
    return StreamOffset.of({partition: resolve(spec.position_for(partition), log)
                            for partition, log in sorted(logs.items())})


def check_offset(offset: StreamOffset, logs: Mapping[int, PartitionLog], *,
                 fail_on_data_loss: bool) -> tuple[StreamOffset, list[DataLoss]]:
    """A checkpointed offset checked against the logs: where to read from, and what was lost.

    Partitions the offset does not know (added since) start at their log's
    start; lost positions raise, or move to where reading can continue.
    """
    positions, losses = {}, []
    for partition, log in sorted(logs.items()):
        position = offset.get(partition, log.start)
        loss = check_position(partition, position, log, fail_on_data_loss=fail_on_data_loss)
        if loss is not None:
            losses.append(loss)
            position = loss.resume_at
        positions[partition] = position
    return StreamOffset.of(positions), losses


def check_position(partition: int, position: LogPosition, log: PartitionLog, *,
                   fail_on_data_loss: bool) -> DataLoss | None:
    """None if ``log`` holds ``position``; else raise (fail_on_data_loss) or say where to resume."""
    problem = _why_missing(position, log)
    if problem is None:
        return None
    why, resume_at = problem
    message = f"stream partition {partition}: {why}"
    if fail_on_data_loss:
        raise DataLossError(f"{message}. Set the option failOnDataLoss=false to continue from "
                            f"{resume_at} instead")
    return DataLoss(partition, position, resume_at,
                    f"{message}; continuing from {resume_at} (failOnDataLoss=false)")


def lost_spans(start: LogPosition, end: LogPosition, log: PartitionLog) -> list[LedgerSpan]:
    """The lost ledgers (``LedgerSpan.lost``) a read from ``start`` up to ``end`` would cross."""
    return [span for span in log.spans
            if span.lost and start.ledger_seq <= span.ledger_seq < end.ledger_seq]


def check_lost(stream: str, partition: int, start: LogPosition, end: LogPosition, log: PartitionLog, *,
               fail_on_data_loss: bool) -> list[str]:
    """Raise DataLossError naming the first lost ledger between ``start`` and ``end`` (fail_on_data_loss);
    else the warnings to log, one per lost ledger skipped."""
    warnings = []
    for span in lost_spans(start, end, log):
        first = start if start.ledger_seq == span.ledger_seq else LogPosition(span.ledger_seq, 0)
        what = (f"stream {stream!r} partition {partition}: ledger {span.ledger_id} (sequence number "
                f"{span.ledger_seq} of the log) is lost (its metadata was deleted), so positions {first} up to "
                f"{span.end} cannot be read")
        if fail_on_data_loss:
            raise DataLossError(f"{what}. Set the option failOnDataLoss=false to skip that range, or drop the "
                                f"lost ledger from the stream (ledger streams repair {stream})")
        warnings.append(f"{what}; skipping them (failOnDataLoss=false)")
    return warnings


def _why_missing(position: LogPosition, log: PartitionLog) -> tuple[str, LogPosition] | None:
    """Why ``log`` does not hold ``position``, and the position to continue from."""
    if position in (log.end, log.truncated_end):
        return None
    if position < log.start:
        return (f"the log was truncated and now starts at {log.start}, so its entries from "
                f"{position} to {log.start} are lost", log.start)
    if position > log.end:
        return (f"the log ends at {log.end}, before the position {position}: was the stream "
                "deleted and written anew? Entries may have been missed", log.start)
    span = log.span(position.ledger_seq)
    if span is None:
        return f"the log has no ledger with sequence number {position.ledger_seq}", log.start
    if span.lost:
        return None  # reported by check_lost for the range read
    if position.entry_id > span.entry_count:
        return (f"ledger {position.ledger_seq} of the log ends at entry {span.last_entry_id}, "
                f"before the position {position}", span.end)
    return None


def advance(position: LogPosition, log: PartitionLog, max_entries: int | None = None,
            max_bytes: int | None = None, *, at_least_one: bool = True) -> LogPosition:
    """The end (exclusive) of the next read from ``position``, within both limits.

    Takes at least one entry when any is readable (unless ``at_least_one`` is
    False), so a stream always makes progress even if one entry is larger than
    ``max_bytes``; returns ``position`` itself when nothing is readable.
    """
    end = position
    entries_left = max_entries
    bytes_left = max_bytes
    for span, first in log.segments_from(position):
        take = span.entry_count - first
        if entries_left is not None:
            take = min(take, entries_left)
        if bytes_left is not None:
            first_take = at_least_one and end == position and bytes_left > 0
            take = min(take, _entries_within(span, bytes_left, at_least_one=first_take))
        if take <= 0:
            break
        end = LogPosition(span.ledger_seq, first + take)
        entries_left = None if entries_left is None else entries_left - take
        bytes_left = None if bytes_left is None else bytes_left - span.bytes_for(take)
        if first + take < span.entry_count:
            break
    return end


def _entries_within(span: LedgerSpan, budget: int, *, at_least_one: bool) -> int:
    mean = span.bytes_for(1)
    fits = budget // mean if mean else span.entry_count
    return max(fits, 1) if at_least_one else fits


def admit(start: StreamOffset, logs: Mapping[int, PartitionLog], *, max_entries: int | None = None,
          max_bytes: int | None = None) -> StreamOffset:
    """The next micro-batch's end offset: every partition's backlog, capped by the limits.

    The budgets are shared across partitions in proportion to their backlogs
    (largest remainders first), so a busy partition cannot starve the others.
    The byte budget is exceeded only when not even one entry fits it: then the
    micro-batch is the next entry of the partition with the largest backlog,
    so that the stream still progresses.
    """
    backlogs = {partition: logs[partition].backlog(position) for partition, position in start.items()}
    entry_shares = _shares(max_entries, {p: entries for p, (entries, _) in backlogs.items()})
    byte_shares = _shares(max_bytes, {p: size for p, (_, size) in backlogs.items()})
    ends = {partition: advance(position, logs[partition], entry_shares.get(partition),
                               byte_shares.get(partition), at_least_one=partition not in byte_shares)
            for partition, position in start.items()}
    if all(ends[p] == start[p] for p in ends) and any(entries for entries, _ in backlogs.values()):
        busiest = max(backlogs, key=lambda p: (backlogs[p][1], backlogs[p][0]))
        ends[busiest] = advance(start[busiest], logs[busiest], max_entries=1)
    return StreamOffset.of(ends)


def _shares(budget: int | None, demands: Mapping[int, int]) -> dict[int, int]:
    """Split ``budget`` proportionally to ``demands`` (none: no limit for anyone)."""
    total = sum(demands.values())
    if budget is None or total <= budget:
        return {}
    exact = {partition: budget * demand / total for partition, demand in demands.items()}
    shares = {partition: int(value) for partition, value in exact.items()}
    left = budget - sum(shares.values())
    for partition in sorted(exact, key=lambda p: shares[p] - exact[p])[:left]:
        shares[partition] += 1
    return shares


def plan_ranges(partition: int, start: LogPosition, end: LogPosition, log: PartitionLog, *,
                max_entries_per_range: int | None = None) -> list[ReadRange]:
    """The entries from ``start`` (inclusive) to ``end`` (exclusive), per ledger and chunked.

    A ledger's entries are cut into as few chunks of at most ``max_entries_per_range``
    as possible, of even size (1,200 entries at most 512 per chunk: 400 each, not
    512, 512, 176), so that no input partition is a small leftover that costs a task
    for little work while the other cores idle.
    """
    if max_entries_per_range is not None and max_entries_per_range < 1:
        raise InvalidArgumentError(f"max_entries_per_range must be >= 1, got {max_entries_per_range}")
    ranges: list[ReadRange] = []
    for span, first in log.segments_from(start):
        if span.ledger_seq > end.ledger_seq:
            break
        last = span.last_entry_id if span.ledger_seq < end.ledger_seq else min(span.last_entry_id,
                                                                                 end.entry_id - 1)
        if last < first:
            break
        for chunk_first, chunk_last in _even_chunks(first, last, max_entries_per_range):
            ranges.append(ReadRange(partition, span.ledger_seq, span.ledger_id, chunk_first, chunk_last))
    return ranges


def _even_chunks(first: int, last: int, most: int | None) -> list[tuple[int, int]]:
    """``first..last`` cut into the fewest chunks of at most ``most`` entries, sizes differing by one at most."""
    count = last - first + 1
    chunks = 1 if most is None else -(-count // most)
    bounds = [first + index * count // chunks for index in range(chunks + 1)]
    return [(begin, end - 1) for begin, end in zip(bounds, bounds[1:])]
