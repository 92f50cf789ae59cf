"""Recovery's read forward with a window of entries in flight (docs/protocol.md R9).

``ForwardReads`` asks for the entries ``first, first + 1, ...`` of one ensemble,
up to ``window`` of them at once beyond the lowest entry not yet taken, tallies
each entry's answers with its own ``coverage.EntryTally`` (PRESENT on one
verified copy, ABSENT on Qw - Qa + 1 explicit negatives, UNKNOWN when the whole
write set answered with neither), and hands the decisions back strictly in
entry order (``take``): entry ``e`` is taken only once every entry below it was
taken as PRESENT. So a decision about an entry past the recovered end -- a copy
of an entry the old writer sent after one that reached too few bookies, or an
unknown there -- is never acted on: the caller stops at the first ABSENT or
UNKNOWN it takes. With ``window == 1`` this is reading one entry at a time.

Refilling: once at least half of the window is free (and at least one entry),
the next entries to fill it are asked for together, so that the caller can send
them as range reads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from pyspark_ledger.entry import MAX_ENTRY_ID
from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.protocol.answers import AnswerKind, ReadAnswer
from pyspark_ledger.protocol.coverage import EntryOutcome, EntryTally
from pyspark_ledger.protocol.recovery_actions import ReadEntry
from pyspark_ledger.protocol.schedule import Quorums

#: Largest window (entries of the read forward in flight at once): ClientConfig.recovery_read_window.
MAX_RECOVERY_READ_WINDOW = 8192


def check_window(window: object, name: str = "window") -> int:
    """``window`` if it is an int in 1..MAX_RECOVERY_READ_WINDOW, else InvalidArgumentError naming the limit."""
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_RECOVERY_READ_WINDOW:
        raise InvalidArgumentError(f"{name} must be an integer from 1 to {MAX_RECOVERY_READ_WINDOW} (entries "
                                   f"read forward at once during recovery), got {window!r}")
    return window


@dataclass(slots=True)
class _Slot:
    tally: EntryTally
    index: dict[str, int]
    present: ReadAnswer | None = field(default=None)


class ForwardReads:
    """The undecided entries of the read forward, one tally each (see the module docstring)."""

    def __init__(self, ensemble: tuple[str, ...], quorums: Quorums, first_entry_id: int, window: int) -> None:
        self._ensemble = ensemble
        self._quorums = quorums
        self._window = check_window(window)
        self._refill_at = max(1, window // 2)
        self._next = first_entry_id         # lowest entry not taken yet
        self._asked_end = first_entry_id    # entries below this were asked for
        self._slots: dict[int, _Slot] = {}
        self._by_residue: dict[int, tuple[tuple[int, ...], dict[str, int], tuple[str, ...]]] = {}

    @property
    def next_entry_id(self) -> int:
        return self._next

    def ask(self, fence: bool = True) -> tuple[ReadEntry, ...]:
        """The reads that fill the window, once at least half of it is free (or nothing)."""
        free = self._window - (self._asked_end - self._next)
        if free < self._refill_at:
            return ()
        last = min(self._asked_end + free - 1, MAX_ENTRY_ID)
        reads = []
        for entry_id in range(self._asked_end, last + 1):
            write_set, index, targets = self._write_set(entry_id)
            self._slots[entry_id] = _Slot(EntryTally(write_set, self._quorums.write_quorum,
                                                     self._quorums.ack_quorum), index)
            reads.append(ReadEntry(entry_id, targets, fence))
        self._asked_end = max(self._asked_end, last + 1)
        return tuple(reads)

    def _write_set(self, entry_id: int) -> tuple[tuple[int, ...], dict[str, int], tuple[str, ...]]:
        residue = entry_id % self._quorums.ensemble_size
        known = self._by_residue.get(residue)
        if known is None:
            write_set = self._quorums.write_set(entry_id)
            known = (write_set, {self._ensemble[i]: i for i in write_set},
                     tuple(self._ensemble[i] for i in write_set))
            self._by_residue[residue] = known
        return known

    def record(self, entry_id: int, bookie_id: str, answer: ReadAnswer) -> bool:
        """Tally one answer; True when it decided the lowest entry not taken (``take`` has work)."""
        slot = self._slots.get(entry_id)
        if slot is None:  # never asked for, already taken, or the read forward is over: a stale answer
            return False
        index = slot.index.get(bookie_id)
        if index is None:
            raise InvalidArgumentError(f"bookie {bookie_id!r} does not store entry {entry_id}")
        outcome = slot.tally.record(index, answer.kind)
        if outcome is EntryOutcome.PRESENT and slot.present is None and answer.kind is AnswerKind.POSITIVE:
            slot.present = answer  # the first verified copy decided it; later copies are not needed
        return entry_id == self._next and outcome is not EntryOutcome.PENDING

    def awaiting(self, entry_id: int) -> bool:
        """Whether answers about ``entry_id`` are still wanted (asked for and undecided)."""
        slot = self._slots.get(entry_id)
        return slot is not None and slot.tally.outcome is EntryOutcome.PENDING

    def take(self) -> Iterator[tuple[int, EntryOutcome, EntryTally, ReadAnswer | None]]:
        """The decided entries from the lowest one not taken, in order, up to the first undecided one.

        The caller stops iterating at the first ABSENT or UNKNOWN (and then calls ``stop``): the entries
        after it are never taken.
        """
        while True:
            slot = self._slots.get(self._next)
            if slot is None or slot.tally.outcome is EntryOutcome.PENDING:
                return
            entry_id = self._next
            del self._slots[entry_id]
            self._next += 1
            yield entry_id, slot.tally.outcome, slot.tally, slot.present

    def stop(self) -> None:
        """The end is decided (or recovery failed): forget every entry in flight; later answers are stale."""
        self._slots.clear()
