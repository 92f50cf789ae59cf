"""Ensemble placement: which bookies form a new ensemble or replace a failed one.

docs/protocol.md W2-W4: a ledger starts on E bookies;
when one fails, the writer replaces it with a bookie outside the ensemble.
Pure: the caller passes the available (writable) bookie ids and a seeded
``random.Random``; candidates are sorted first, so the choice depends only
on the candidate set and the rng state. ``PlacementPolicy`` is the seam for
other policies (rack- or zone-aware ones, say).
"""
from __future__ import annotations

import random
from typing import Iterable, Mapping, Protocol, Sequence

from pyspark_ledger.errors import InvalidArgumentError, NotEnoughBookiesError
from pyspark_ledger.protocol.schedule import check_bookie_index


class PlacementPolicy(Protocol):
    """How ensembles are chosen and repaired."""

    def choose_ensemble(self, available: Iterable[str], size: int, exclude: Iterable[str],
                        rng: random.Random) -> tuple[str, ...]: ...

    def replace_bookie(self, ensemble: Sequence[str], index: int, available: Iterable[str],
                       exclude: Iterable[str], rng: random.Random) -> str: ...


def _candidates(available: Iterable[str], exclude: Iterable[str]) -> tuple[list[str], set[str], set[str]]:
    pool = {str(bookie) for bookie in available}
    excluded = {str(bookie) for bookie in exclude} & pool
    return sorted(pool - excluded), pool, excluded


def _not_enough(needed: int, eligible: int, pool: set[str], excluded: set[str], what: str) -> NotEnoughBookiesError:
    return NotEnoughBookiesError(
        f"need {needed} bookie(s) {what} but only {eligible} eligible: {len(pool)} available,"
        f" {len(excluded)} of them excluded ({', '.join(sorted(excluded)) or 'none'});"
        " bring back bookies that failed, start more bookies, or lower the ensemble size"
    )


def choose_ensemble(available: Iterable[str], size: int, exclude: Iterable[str],
                    rng: random.Random) -> tuple[str, ...]:
    """``size`` distinct bookies from ``available`` minus ``exclude``, in random order."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise InvalidArgumentError(f"ensemble size must be a positive integer, got {size!r}")
    eligible, pool, excluded = _candidates(available, exclude)
    if len(eligible) < size:
        raise _not_enough(size, len(eligible), pool, excluded, "for a new ensemble")
    return tuple(rng.sample(eligible, size))


def replace_bookie(ensemble: Sequence[str], index: int, available: Iterable[str],
                   exclude: Iterable[str], rng: random.Random) -> str:
    """A bookie to put at ``ensemble[index]``: not already in the ensemble, not excluded."""
    return replace_bookies(ensemble, (index,), available, exclude, rng)[index]


def replace_bookies(ensemble: Sequence[str], indexes: Iterable[int], available: Iterable[str],
                    exclude: Iterable[str], rng: random.Random) -> dict[int, str]:
    """Distinct replacements for several indexes at once (W3: two failures)."""
    wanted = sorted(set(indexes))
    if not wanted:
        raise InvalidArgumentError("replace_bookies needs at least one bookie index to replace")
    for index in wanted:
        check_bookie_index(index, len(ensemble))
    eligible, pool, excluded = _candidates(available, set(exclude) | set(ensemble))
    if len(eligible) < len(wanted):
        raise _not_enough(len(wanted), len(eligible), pool, excluded,
                          f"to replace ensemble position(s) {wanted}")
    return dict(zip(wanted, rng.sample(eligible, len(wanted))))


def replacement_exclusions(failing: Iterable[str], failed_before: Iterable[str]) -> tuple[frozenset[str], ...]:
    """The exclusion sets to try, in order, when replacing ``failing`` bookies of a writer.

    First every bookie that ever failed this writer; if that leaves too few candidates, only the failing
    ones: a bookie that failed before (perhaps it was only slow) gets a second chance rather than the
    writer failing with not-enough-bookies."""
    failing = frozenset(failing)
    everything = failing | frozenset(failed_before)
    return (everything,) if everything == failing else (everything, failing)


def apply_replacements(ensemble: Sequence[str], replacements: Mapping[int, str]) -> tuple[str, ...]:
    """The ensemble with ``replacements`` (index -> bookie id) applied; checks distinctness."""
    result = list(ensemble)
    for index, bookie in replacements.items():
        check_bookie_index(index, len(result))
        result[index] = str(bookie)
    if len(set(result)) != len(result):
        raise InvalidArgumentError(
            f"replacements {dict(replacements)} would put a bookie twice in ensemble {tuple(result)}"
        )
    return tuple(result)


class RandomPlacement:
    """The default policy: uniform random choice among eligible bookies."""

    def choose_ensemble(self, available: Iterable[str], size: int, exclude: Iterable[str],
                        rng: random.Random) -> tuple[str, ...]:
        return choose_ensemble(available, size, exclude, rng)

    def replace_bookie(self, ensemble: Sequence[str], index: int, available: Iterable[str],
                       exclude: Iterable[str], rng: random.Random) -> str:
        return replace_bookie(ensemble, index, available, exclude, rng)
