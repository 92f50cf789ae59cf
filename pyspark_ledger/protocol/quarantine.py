"""Quarantine of failing bookies and the back-off between a writer's ensemble changes (issue 12, part 9).

Two unreachable bookies used to make a writer swap one ensemble position
between them hundreds of times a second, one metadata compare-and-set each,
and leave a ledger of hundreds of fragments. Two rules stop that; both are
pure (the caller passes the clock's reading ``now``, in seconds).

Quarantine (as BookKeeper's placement quarantines bookies that failed adds):
a bookie that failed a client is avoided by that client's placement for a
while. The first failure quarantines it for ``base_s``; a failure within
``max_s`` after the previous quarantine ended doubles the time, up to
``max_s``; failures *during* a quarantine (answers of requests already in
flight, other writers seeing the same outage) do not lengthen it. A record is
forgotten ``max_s`` after its quarantine ended.

Quarantine is a preference, not a ban: ``exclusion_rounds`` lists the
exclusion sets to try in turn, and when no bookie outside the quarantine is
left, quarantined bookies are taken back one at a time, the one whose
quarantine ends first first. The bookies that are failing right now are
never taken back (the writer is replacing them).

Back-off: within a streak of ensemble changes of one ledger (changes less than
``quiet_s`` apart) the n-th change (n >= 2) waits until
``min(max_s, base_s * 2 ** (n - 2))`` s after the previous one. With the
defaults (0.1 s, 1 s) the changes of a streak come at the earliest at
0, 0.1, 0.3, 0.7, 1.5, 2.5, 3.5, ... s, so **a ledger gets at most
``5 + floor(T - 1.5)`` ensemble changes (``6 + floor(T - 1.5)`` fragments)
in T >= 1.5 s of flapping, and at most 5 changes before** (``max_changes``).
The writer's confirmations wait during the back-off (W2), its adds do not
(docs/protocol.md W7).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from pyspark_ledger.errors import InvalidConfigurationError


@dataclass(frozen=True, slots=True)
class QuarantineRule:
    """How long a failing bookie is avoided: ``base_s``, doubled per repeated failure, at most ``max_s``."""

    base_s: float = 5.0
    max_s: float = 120.0

    def __post_init__(self) -> None:
        _check_times("quarantine", self.base_s, self.max_s)


@dataclass(frozen=True, slots=True)
class Sentence:
    """One bookie's quarantine: how many failures in a row (``strikes``) and until when it lasts."""

    strikes: int
    until: float


def after_failure(previous: Sentence | None, now: float, rule: QuarantineRule) -> Sentence:
    """The bookie's quarantine after it failed at ``now`` (see the module docstring)."""
    if previous is not None and now < previous.until:
        return previous
    recent = previous is not None and now - previous.until < rule.max_s
    strikes = previous.strikes + 1 if recent else 1
    return Sentence(strikes, now + min(rule.max_s, rule.base_s * 2.0 ** min(strikes - 1, 64)))


def quarantined(sentences: Mapping[str, Sentence], now: float) -> tuple[str, ...]:
    """The bookies in quarantine at ``now``, the one released first first (ties by id)."""
    return tuple(bookie for bookie, sentence in sorted(sentences.items(), key=lambda item: (item[1].until, item[0]))
                 if now < sentence.until)


def forgotten(sentences: Mapping[str, Sentence], now: float, rule: QuarantineRule) -> tuple[str, ...]:
    """The records that no longer matter: their quarantine ended ``max_s`` ago or more."""
    return tuple(sorted(bookie for bookie, sentence in sentences.items() if now - sentence.until >= rule.max_s))


def exclusion_rounds(failing: Iterable[str], failed_before: Iterable[str],
                     in_quarantine: Iterable[str]) -> tuple[frozenset[str], ...]:
    """Exclusion sets for choosing bookies, strongest first; try each until one leaves enough candidates.

    ``failing``: the bookies being replaced (always excluded); ``failed_before``: bookies that failed this
    writer earlier; ``in_quarantine``: in release order (``quarantined``). Rounds: everything; then
    without ``failed_before``; then quarantined bookies taken back one at a time in release order; last
    only ``failing`` (so a writer is never stopped by the quarantine alone). Never two equal rounds."""
    failing = frozenset(failing)
    order = [bookie for bookie in dict.fromkeys(in_quarantine) if bookie not in failing]
    rounds = [failing | frozenset(failed_before) | frozenset(order)]
    for released in range(len(order) + 1):
        rounds.append(failing | frozenset(order[released:]))
    unique: list[frozenset[str]] = []
    for excluded in rounds:
        if excluded not in unique:
            unique.append(excluded)
    return tuple(unique)


@dataclass(frozen=True, slots=True)
class ChangeBackoff:
    """Back-off between the ensemble changes of one ledger (see the module docstring)."""

    base_s: float = 0.1
    max_s: float = 1.0
    quiet_s: float = 10.0

    def __post_init__(self) -> None:
        _check_times("ensemble change back-off", self.base_s, self.max_s)
        if not (isinstance(self.quiet_s, (int, float)) and self.max_s <= self.quiet_s < math.inf):
            raise InvalidConfigurationError(
                f"ensemble change back-off quiet_s must be a finite number >= max_s ({self.max_s}), "
                f"got {self.quiet_s!r}")


def change_delay(streak: int, since_last: float | None, rule: ChangeBackoff) -> float:
    """Seconds to wait before the next ensemble change.

    ``streak``: changes already made in the current streak; ``since_last``: seconds since the last of
    them (None: never). 0 when the streak is over (``quiet_s``) or this is its first change."""
    if since_last is None or since_last >= rule.quiet_s or streak < 1:
        return 0.0
    gap = min(rule.max_s, rule.base_s * 2.0 ** min(streak - 1, 64))
    return max(0.0, gap - max(0.0, since_last))


def streak_after_change(streak: int, since_last: float | None, rule: ChangeBackoff) -> int:
    """The streak length once a change was made ``since_last`` s after the previous one."""
    if since_last is None or since_last >= rule.quiet_s:
        return 1
    return streak + 1


def max_changes(seconds: float, rule: ChangeBackoff) -> int:
    """The most ensemble changes one streak can make within ``seconds`` of its first change (the bound)."""
    changes, at = 1, 0.0
    while True:
        at += min(rule.max_s, rule.base_s * 2.0 ** min(changes - 1, 64))
        if at > seconds + 1e-9:  # sums of binary fractions: 0.1 + 0.2 > 0.3
            return changes
        changes += 1


def _check_times(what: str, base_s: float, max_s: float) -> None:
    for name, value in (("base_s", base_s), ("max_s", max_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise InvalidConfigurationError(f"{what} {name} must be a finite number of seconds > 0, got {value!r}")
    if base_s > max_s:
        raise InvalidConfigurationError(f"{what} base_s ({base_s}) must not exceed max_s ({max_s})")
