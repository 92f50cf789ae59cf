"""Recovery's per-entry reads as range reads (docs/protocol.md R9): which bookie is asked for which entries.

The recovery state machine asks for single entries (``ReadEntry``: one entry, its
write set, the fence flag) and tallies answers per entry. ``coalesce`` turns the
reads it asked for at once into one ``RangeRead`` per bookie and run of entries:
with E == Qw every bookie stores every entry and a run is contiguous (step 1);
with E > Qw a bookie stores only the entries of some residues modulo E, so a run
is every E-th entry (step E, as ``stripes`` does for readers). Each entry of a run
was asked of that bookie.

A bookie answers a range read with the entries from the first one on, in order,
and stops at the first one it cannot give (absent, unreadable, or its byte
budget); only when it gives none does its status speak for the first entry. So
an answer covers a prefix of the run: ``rest_after`` is what is left to ask, and
the caller asks again only while recovery still waits for one of those entries.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.protocol.recovery_actions import ReadEntry


@dataclass(frozen=True, slots=True)
class RangeRead:
    """Entries ``first_entry_id, first + step, ... last_entry_id`` of one bookie, fencing if ``fence``."""

    bookie_id: str
    first_entry_id: int
    last_entry_id: int
    step: int
    fence: bool

    @property
    def entry_ids(self) -> range:
        return range(self.first_entry_id, self.last_entry_id + 1, self.step)

    def rest_after(self, answered: int) -> "RangeRead | None":
        """The run without its first ``answered`` entries (None when nothing is left)."""
        if answered < 1:
            raise InvalidArgumentError(f"a range answer covers at least one entry, got {answered}")
        first = self.first_entry_id + answered * self.step
        if first > self.last_entry_id:
            return None
        return RangeRead(self.bookie_id, first, self.last_entry_id, self.step, self.fence)


def read_step(ensemble_size: int, write_quorum: int) -> int:
    """Distance between the entries of one run: 1 when every bookie stores every entry, else E."""
    return 1 if ensemble_size == write_quorum else ensemble_size


def coalesce(reads: Iterable[ReadEntry], step: int, max_entries: int) -> list[RangeRead]:
    """One ``RangeRead`` per bookie, fence flag and run of entries ``step`` apart, at most ``max_entries`` long.

    Every (entry, bookie) pair of ``reads`` is in exactly one run; runs come in the order of their first
    entries, the bookies of one entry in its write-set order.
    """
    if step < 1 or max_entries < 1:
        raise InvalidArgumentError(f"step and max_entries must be >= 1, got {step} and {max_entries}")
    groups: dict[tuple[str, bool, int], list[int]] = {}
    for read in sorted(reads, key=lambda r: r.entry_id):
        for bookie in read.targets:
            groups.setdefault((bookie, read.fence, read.entry_id % step), []).append(read.entry_id)
    runs: list[tuple[int, int, RangeRead]] = []
    for order, ((bookie, fence, _), entry_ids) in enumerate(groups.items()):
        first = previous = entry_ids[0]
        count = 1
        for entry_id in entry_ids[1:]:
            if entry_id == previous:
                continue  # asked twice: once is enough
            if entry_id != previous + step or count == max_entries:
                runs.append((first, order, RangeRead(bookie, first, previous, step, fence)))
                first, count = entry_id, 0
            previous = entry_id
            count += 1
        runs.append((first, order, RangeRead(bookie, first, previous, step, fence)))
    runs.sort(key=lambda run: run[:2])
    return [run for _, _, run in runs]
