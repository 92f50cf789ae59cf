"""What a partition's log holds, as pure values: ``LedgerSpan`` per ledger, ``PartitionLog`` per partition.

``log_views`` builds them from the stream's record and its ledgers' metadata;
read planning (``spark.planning``) and the Spark readers consume them. They
are plain data with the arithmetic of the slots they cover (start, end,
backlog, the segments to read from a position); no I/O, no pyarrow.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.log.positions import LogPosition


@dataclass(frozen=True, slots=True)
class LedgerSpan:
    """The readable entries 0..last_entry_id of one ledger of a log (-1: none yet)."""

    ledger_seq: int
    ledger_id: int
    last_entry_id: int
    length: int = 0  # bytes of entries 0..last_entry_id (from metadata or entry headers)
    lost: bool = False  # the log refers to it but its metadata is gone (deleted by hand): nothing readable

    @property
    def entry_count(self) -> int:
        return self.last_entry_id + 1

    @property
    def end(self) -> LogPosition:
        """The slot after its last readable entry (a lost ledger: the start of the next ledger)."""
        if self.lost:
            return LogPosition(self.ledger_seq + 1, 0)
        return LogPosition(self.ledger_seq, self.last_entry_id + 1)

    def bytes_for(self, entries: int) -> int:
        """Estimated bytes of ``entries`` entries of this ledger (its mean entry size)."""
        if self.entry_count <= 0:
            return 0
        return -(-self.length * entries // self.entry_count)


@dataclass(frozen=True, slots=True)
class PartitionLog:
    """The ledgers still in one partition's log, oldest first, as the log layer reports them.

    ``next_ledger_seq`` places an empty log (no ledger left or yet). ``truncated_end``
    is the end slot of the newest ledger truncated away, if the log layer keeps it:
    a reader checkpointed exactly there had read that ledger to its end, so
    resuming from it loses nothing.
    """

    spans: tuple[LedgerSpan, ...]
    next_ledger_seq: int | None = None
    truncated_end: LogPosition | None = None

    def __post_init__(self) -> None:
        seqs = [span.ledger_seq for span in self.spans]
        if any(later != earlier + 1 for earlier, later in zip(seqs, seqs[1:])):
            raise InvalidArgumentError(
                f"ledger sequence numbers of a log must be consecutive, got {seqs}")
        if any(span.last_entry_id < -1 or span.length < 0 for span in self.spans):
            raise InvalidArgumentError("a ledger span needs last_entry_id >= -1 and length >= 0")

    @property
    def start(self) -> LogPosition:
        """The first slot still in the log."""
        if self.spans:
            return LogPosition(self.spans[0].ledger_seq, 0)
        return LogPosition(self.next_ledger_seq or 0, 0)

    @property
    def end(self) -> LogPosition:
        """The slot after the last readable entry."""
        return self.spans[-1].end if self.spans else self.start

    def span(self, ledger_seq: int) -> LedgerSpan | None:
        if not self.spans or not self.spans[0].ledger_seq <= ledger_seq <= self.spans[-1].ledger_seq:
            return None
        return self.spans[ledger_seq - self.spans[0].ledger_seq]

    def backlog(self, position: LogPosition) -> tuple[int, int]:
        """(entries, estimated bytes) readable from ``position`` to the end."""
        entries = size = 0
        for span, first in self.segments_from(position):
            entries += span.entry_count - first
            size += span.bytes_for(span.entry_count - first)
        return entries, size

    def segments_from(self, position: LogPosition) -> Iterator[tuple[LedgerSpan, int]]:
        """(span, first entry to read in it) from ``position`` on, skipping read-out ledgers."""
        for span in self.spans:
            if span.ledger_seq < position.ledger_seq:
                continue
            first = position.entry_id if span.ledger_seq == position.ledger_seq else 0
            if first < span.entry_count:
                yield span, first
