"""Reader rules: how far a reader may read, how a range is cut into range reads, how a LAC advances.

* ``readable_last_entry`` -- a CLOSED ledger is readable to its last entry; an
  OPEN / IN_RECOVERY one to its last add confirmed, and never below the
  current fragment's first entry - 1: an ensemble change starts its fragment
  at the first unconfirmed entry, so every entry before it was confirmed (docs/protocol.md L4, R8).
* ``plan_batches`` -- a range is read fragment by fragment, in batches of at
  most ``max_entries``; each batch names its ensemble. Which replica to ask,
  and when an entry counts as absent, stays with ``reads.ReadPlan`` (driven
  for the batch's first entry; a replica's range answer stops at its first
  missing entry, so a short answer is simply continued by the next batch).
  With E > Qw a batch is read as stripes, one per write set (``stripes``).
* ``advance_lac`` -- any LAC a bookie reports was written in an entry header
  by the writer, which only writes LACs it had confirmed: a single such answer
  is a safe lower bound (tailing readers), while the *maximum* needs coverage
  (``reads.LacRead``). A reader's LAC never goes back (L3).
* ``slow_after`` -- when a replica asked counts as slow (a speculative read):
  its clock runs while the reader waits for it and none of the reader's reads
  makes progress, and, while others are out, not before a read sent after
  it was answered (L7).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from pyspark_ledger.errors import InvalidArgumentError, NoSuchEntryError
from pyspark_ledger.metadata.model import LedgerMetadata


@dataclass(frozen=True, slots=True)
class ReadBatch:
    """Entries ``first_entry_id..last_entry_id`` (every ``step``-th: a stripe, see ``stripes``), all stored by
    the fragment ``ensemble``."""

    first_entry_id: int
    last_entry_id: int
    ensemble: tuple[str, ...]
    step: int = 1


def lac_floor(md: LedgerMetadata) -> int:
    """Entries below the current fragment's first entry were all confirmed."""
    return md.current_fragment.first_entry_id - 1


def readable_last_entry(md: LedgerMetadata, last_add_confirmed: int) -> int:
    """The highest entry a reader may read, given the LAC it knows."""
    if md.is_closed:
        return md.last_entry_id
    return max(last_add_confirmed, lac_floor(md))


def check_read_range(ledger_id: int, first_entry_id: int, last_entry_id: int, readable_last: int) -> None:
    """Raise unless first..last is a well-formed range within what may be read."""
    for name, value in (("first", first_entry_id), ("last", last_entry_id)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgumentError(f"{name} entry id must be an integer, got {value!r}")
    if first_entry_id < 0 or last_entry_id < first_entry_id:
        raise InvalidArgumentError(
            f"cannot read entries {first_entry_id}..{last_entry_id} of ledger {ledger_id}: need 0 <= first <= last")
    if last_entry_id > readable_last:
        raise NoSuchEntryError(
            f"entry {last_entry_id} of ledger {ledger_id} is beyond the readable end {readable_last} (the last "
            "entry of a closed ledger, else the last add confirmed): wait_for_entry() or read_last_add_confirmed()")


def fragment_last_entry(md: LedgerMetadata, entry_id: int) -> int | None:
    """The last entry id of the fragment that holds ``entry_id`` (None: the open-ended current one)."""
    for fragment in md.fragments:
        if fragment.first_entry_id > entry_id:
            return fragment.first_entry_id - 1
    return None


def plan_batches(md: LedgerMetadata, first_entry_id: int, last_entry_id: int,
                 max_entries: int) -> Iterator[ReadBatch]:
    """Batches covering first..last in order, none crossing a fragment boundary."""
    if max_entries < 1:
        raise InvalidArgumentError(f"max_entries must be >= 1, got {max_entries}")
    cursor = first_entry_id
    while cursor <= last_entry_id:
        end = min(last_entry_id, cursor + max_entries - 1)
        fragment_end = fragment_last_entry(md, cursor)
        if fragment_end is not None:
            end = min(end, fragment_end)
        yield ReadBatch(cursor, end, md.ensemble_for(cursor))
        cursor = end + 1


def advance_lac(known: int, reported: int) -> int:
    """The reader's LAC after a bookie reported ``reported`` (never lower than ``known``)."""
    return max(known, reported)


def slow_after(delay: float, timed_at: float, last_answer_at: float, now: float, *, sent_at: float,
               newest_answered_sent_at: float, others_in_flight: int) -> float:
    """Seconds until a replica asked at ``sent_at`` (its clock started at ``timed_at``) counts as slow, <= 0
    once it does (docs/protocol.md L7).

    Slow means slower than the others: while the reader has ``others_in_flight`` range reads out to other
    bookies, the replica is not slow before one of its reads sent at or after ``sent_at`` was answered
    (``newest_answered_sent_at``: when the newest read answered so far was sent) -- until then the reads
    ahead of it share the cores with it, and the earliest it could be slow is ``delay`` from now. The clock
    runs only while none of the reader's reads makes progress: it starts again at ``last_answer_at``, when
    an answer of any of them last arrived or was verified.
    """
    if not delay > 0:
        raise InvalidArgumentError(f"the speculative read delay must be > 0 s, got {delay}")
    if others_in_flight < 0:
        raise InvalidArgumentError(f"others_in_flight must be >= 0, got {others_in_flight}")
    if others_in_flight and newest_answered_sent_at < sent_at:
        return delay
    return max(timed_at, last_answer_at) + delay - now
