"""Re-replication: which copies a lost bookie took with it, and the metadata that names their new home.

When a bookie is gone for good (its disk died, it was decommissioned), every
fragment whose ensemble names it keeps fewer copies of some entries than its
write quorum asks for; one more failure may lose them. Re-replication copies
those entries from the surviving replicas to a replacement bookie and then
swaps the replacement into the fragment's ensemble by one metadata CAS (the
job of BookKeeper's recovery tools and AutoRecovery).

Only *sealed* fragments are repaired: every fragment but the last, and the
last one once the ledger is CLOSED. The last fragment of a ledger that is
still OPEN (or IN_RECOVERY) belongs to its writer, whose ensemble change (or
a recovery open) replaces a failed bookie there; touching it here would race
with the writer's own CAS.

Pure functions, no I/O: ``plan_repairs`` says what to copy, ``entries_of``
which entry ids a repair covers, and ``apply_repairs`` the new metadata, or
None when the stored metadata no longer matches the plan. ``AbsenceClock``
decides when a bookie that left counts as lost (automatic re-replication).

A ledger whose writer died keeps its last fragment open for ever: when that
fragment names a lost bookie, ``open_on_lost`` says so, and after a grace
period (``Lasting``: the writer may still be alive and about to replace the
bookie itself) automatic re-replication recovers the ledger -- fencing and
closing it, as BookKeeper's replication worker does -- so that the fragment
is sealed and can be repaired.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

from pyspark_ledger.metadata.model import CLOSED, Fragment, LedgerMetadata
from pyspark_ledger.protocol.schedule import is_in_write_set, write_set


@dataclass(frozen=True, slots=True)
class FragmentRepair:
    """One lost replica slot: the bookie at ``bookie_index`` of the fragment starting at ``first_entry_id``."""

    first_entry_id: int
    last_entry_id: int          # first_entry_id - 1 for a fragment that holds no entries
    bookie_index: int
    lost_bookie: str
    ensemble: tuple[str, ...]   # the fragment's ensemble as planned (lost bookie included)


@dataclass(frozen=True, slots=True)
class RepairPlan:
    repairs: tuple[FragmentRepair, ...]
    #: Fragments naming a lost bookie that are left alone: the open ledger's last fragment.
    skipped_open_fragments: tuple[int, ...]


def lost_bookies(metadata: LedgerMetadata, available: Iterable[str]) -> set[str]:
    """The bookies named in the ledger's fragments that are not among ``available``."""
    alive = set(available)
    return {bookie for fragment in metadata.fragments for bookie in fragment.bookies if bookie not in alive}


def fragment_bounds(metadata: LedgerMetadata, index: int) -> tuple[int, int] | None:
    """(first, last) entry ids of fragment ``index``; None if it is the open ledger's unsealed last fragment."""
    fragments = metadata.fragments
    first = fragments[index].first_entry_id
    if index + 1 < len(fragments):
        return first, fragments[index + 1].first_entry_id - 1
    if metadata.state != CLOSED:
        return None
    return first, max(metadata.last_entry_id, first - 1)


def plan_repairs(metadata: LedgerMetadata, lost: Iterable[str]) -> RepairPlan:
    """Every sealed (fragment, bookie slot) held by a ``lost`` bookie, in fragment then slot order."""
    lost = set(lost)
    repairs: list[FragmentRepair] = []
    skipped: list[int] = []
    for index, fragment in enumerate(metadata.fragments):
        slots = [slot for slot, bookie in enumerate(fragment.bookies) if bookie in lost]
        if not slots:
            continue
        bounds = fragment_bounds(metadata, index)
        if bounds is None:
            skipped.append(fragment.first_entry_id)
            continue
        for slot in slots:
            repairs.append(FragmentRepair(bounds[0], bounds[1], slot, fragment.bookies[slot], fragment.bookies))
    return RepairPlan(tuple(repairs), tuple(skipped))


def entries_of(repair: FragmentRepair, ensemble_size: int, write_quorum: int) -> Iterator[int]:
    """The entry ids of the repair's fragment whose write set includes the lost slot, in order."""
    for entry_id in range(repair.first_entry_id, repair.last_entry_id + 1):
        if is_in_write_set(entry_id, repair.bookie_index, ensemble_size, write_quorum):
            yield entry_id


def sources_of(repair: FragmentRepair, entry_id: int, write_quorum: int, lost: Iterable[str]) -> list[str]:
    """The surviving replicas of ``entry_id`` in the repair's fragment, in write-set order."""
    lost = set(lost)
    indexes = write_set(entry_id, len(repair.ensemble), write_quorum)
    return [repair.ensemble[i] for i in indexes if repair.ensemble[i] not in lost]


def apply_repairs(metadata: LedgerMetadata, replacements: Mapping[FragmentRepair, str]) -> LedgerMetadata | None:
    """The metadata with each repaired slot naming its replacement; None if the plan no longer fits.

    The plan fits while every repaired fragment still starts at the same entry,
    still has the lost bookie in that slot, and is still sealed no shorter than
    the copy made (a ledger closed since the plan keeps its sealed fragments).
    """
    fragments = list(metadata.fragments)
    by_first = {fragment.first_entry_id: index for index, fragment in enumerate(fragments)}
    for repair, replacement in replacements.items():
        index = by_first.get(repair.first_entry_id)
        if index is None:
            return None
        bookies = list(fragments[index].bookies)
        if bookies[repair.bookie_index] == replacement:
            continue  # already applied (a retried CAS)
        if bookies[repair.bookie_index] != repair.lost_bookie or replacement in bookies:
            return None
        bounds = fragment_bounds(metadata, index)
        if bounds is None or bounds[1] != repair.last_entry_id:
            return None
        bookies[repair.bookie_index] = replacement
        fragments[index] = Fragment(fragments[index].first_entry_id, tuple(bookies))
    return metadata.with_changes(fragments=tuple(fragments))


@dataclass
class Lasting:
    """Which keys have been present in every observation for at least ``delay_s`` (a key that is
    missing once starts again)."""

    delay_s: float
    since: dict = field(default_factory=dict)

    def observe(self, present: Iterable, now: float) -> set:
        present = set(present)
        for key in [key for key in self.since if key not in present]:
            del self.since[key]
        for key in present:
            self.since.setdefault(key, now)
        return {key for key, since in self.since.items() if now - since >= self.delay_s}


class AbsenceClock:
    """When an unregistered bookie counts as lost: after ``delay_s`` of absence without a return.

    A bookie that restarts (a deploy, a reboot) is back within seconds and
    must not be re-replicated; one gone for ``delay_s`` is (BookKeeper's
    lost-bookie recovery delay). ``observe`` is called with the bookies the
    ledgers name and those registered now, and the time; it returns the lost ones.
    """

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self._absent = Lasting(delay_s)

    @property
    def absent_since(self) -> dict[str, float]:
        return dict(self._absent.since)

    def observe(self, named: Iterable[str], registered: Iterable[str], now: float) -> set[str]:
        return self._absent.observe(set(named) - set(registered), now)


def open_on_lost(metadata: LedgerMetadata, lost: Iterable[str]) -> bool:
    """True if the ledger is not CLOSED and its last fragment -- its writer's, never repaired here --
    names a ``lost`` bookie: only a recovery (fence and close) seals that fragment for repair."""
    return metadata.state != CLOSED and not set(metadata.fragments[-1].bookies).isdisjoint(lost)


def should_scan(previous: frozenset[str] | None, registered: Iterable[str], pending: bool, rounds_since_scan: int,
                every: int) -> bool:
    """Whether an automatic re-replication round must read every ledger's metadata.

    It must on its first round (``previous`` is None), while anything is
    pending from the last scan (a bookie absent, a repair that failed, a
    ledger waiting for its grace period), when a bookie registered at the
    last scan (``previous``) is gone now, and every ``every`` rounds anyway.
    Otherwise nothing can have become under-replicated: ledgers are created
    on registered bookies only, and a bookie that left and came back between
    two rounds lost nothing.
    """
    return previous is None or pending or not previous.issubset(registered) or rounds_since_scan + 1 >= every
