"""Zone- and rack-aware placement: ensembles and replacements whose write quorums spread over zones.

docs/protocol.md P1-P4. The caller passes the available (writable) bookie ids, the ``Location``
(zone, rack) of each (``metadata.bookie_location``; a bookie missing from the map is in the
default zone and rack), the ledger's Qw and Qa, how many zones every ack quorum must span
(``min_ack_zones``, 1 = no demand) and a seeded ``random.Random``.

* When every eligible bookie has the same location -- no bookie declared a zone or rack -- the
  choice is exactly the one of ``placement.choose_ensemble`` / ``replace_bookie`` for the same rng
  (P4): nothing changes for clusters without zones.
* Otherwise a depth-first search over which location fills each open position finds the sequence
  of locations with the best ``zone_spread.Spread`` (P1), then picks the bookies of each location
  at random. The search tries the least crowded locations first, stops as soon as it reaches the
  ideal spread (``zone_spread.ideal_key``), and prunes every branch already worse than the best
  found; it is exhaustive for small clusters and stops after ``budget`` steps on large ones with
  the best found so far.
* When the best falls short (P3): with ``min_ack_zones`` = 1 the placement is made and its
  ``warning`` says what is missing (the client logs it); with ``min_ack_zones`` >= 2 and some ack
  quorum able to lie within fewer zones, NotEnoughBookiesError names the zones.
"""
from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Iterable, Mapping, NamedTuple, Sequence

from pyspark_ledger.errors import InvalidArgumentError, NotEnoughBookiesError
from pyspark_ledger.metadata.bookie_location import DEFAULT_LOCATION, Location
from pyspark_ledger.metadata.model import check_quorums
from pyspark_ledger.protocol.placement import RandomPlacement, _candidates, _not_enough, choose_ensemble, replace_bookie
from pyspark_ledger.protocol.schedule import check_bookie_index
from pyspark_ledger.protocol.zone_spread import (Spread, describe_shortfall, ideal_key, spread_of,
                                                 spread_of_windows, window_positions)

#: Search steps (positions tried) before the best placement found so far is taken.
SEARCH_BUDGET = 1_500
#: The most zones an ack quorum may be asked to span (bounds ``min_ack_zones``).
MAX_ACK_ZONES = 16


class Placement(NamedTuple):
    """What was chosen (an ensemble tuple, or index -> replacement), its spread, and a warning (P3) or None."""

    bookies: tuple[str, ...] | dict[int, str]
    spread: Spread
    warning: str | None


def check_min_ack_zones(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_ACK_ZONES:
        raise InvalidArgumentError(f"min_ack_zones must be an integer in 1..{MAX_ACK_ZONES}, got {value!r}")
    return value


def place_ensemble(available: Iterable[str], size: int, exclude: Iterable[str], rng: random.Random, *,
                   locations: Mapping[str, Location], write_quorum: int, ack_quorum: int, min_ack_zones: int = 1,
                   budget: int = SEARCH_BUDGET) -> Placement:
    """A new ensemble of ``size`` bookies from ``available`` minus ``exclude`` (P1-P4)."""
    check_quorums(size, write_quorum, ack_quorum)
    check_min_ack_zones(min_ack_zones)
    eligible, pool, excluded = _candidates(available, exclude)
    where = {bookie: locations.get(bookie, DEFAULT_LOCATION) for bookie in eligible}
    if len(set(where.values())) <= 1:  # P4: one location, today's uniform choice
        ensemble = choose_ensemble(available, size, exclude, rng)
        chosen = [where[bookie] for bookie in ensemble]
    else:
        if len(eligible) < size:
            raise _not_enough(size, len(eligible), pool, excluded, "for a new ensemble")
        chosen = _search([None] * size, Counter(where.values()), write_quorum, ack_quorum, min_ack_zones, rng,
                         budget)
        picked = _assign(chosen, range(size), where, rng)
        ensemble = tuple(picked[i] for i in range(size))
    return _judged(ensemble, chosen, sorted({loc.zone for loc in where.values()}), where, write_quorum,
                   ack_quorum, min_ack_zones, "for a new ensemble")


def place_replacements(ensemble: Sequence[str], indexes: Iterable[int], available: Iterable[str],
                       exclude: Iterable[str], rng: random.Random, *, locations: Mapping[str, Location],
                       write_quorum: int, ack_quorum: int, min_ack_zones: int = 1,
                       budget: int = SEARCH_BUDGET) -> Placement:
    """Distinct replacements, outside ``ensemble`` and ``exclude``, for ``indexes`` of ``ensemble`` (P1-P4)."""
    ensemble = tuple(str(bookie) for bookie in ensemble)
    wanted = sorted(set(indexes))
    if not wanted:
        raise InvalidArgumentError("place_replacements needs at least one bookie index to replace")
    for index in wanted:
        check_bookie_index(index, len(ensemble))
    check_quorums(len(ensemble), write_quorum, ack_quorum)
    check_min_ack_zones(min_ack_zones)
    eligible, pool, excluded = _candidates(available, set(exclude) | set(ensemble))
    if len(eligible) < len(wanted):
        raise _not_enough(len(wanted), len(eligible), pool, excluded, f"to replace ensemble position(s) {wanted}")
    where = {bookie: locations.get(bookie, DEFAULT_LOCATION) for bookie in eligible}
    fixed: list[Location | None] = [locations.get(bookie, DEFAULT_LOCATION) for bookie in ensemble]
    for index in wanted:
        fixed[index] = None
    if len(set(where.values())) == 1:  # P4: one location to choose from, today's choice
        current = list(ensemble)
        chosen: dict[int, str] = {}
        for index in wanted:
            chosen[index] = current[index] = replace_bookie(current, index, eligible, set(chosen.values()), rng)
    else:
        filled = _search(fixed, Counter(where.values()), write_quorum, ack_quorum, min_ack_zones, rng, budget)
        chosen = _assign(filled, wanted, where, rng)
    result = list(ensemble)
    for index, bookie in chosen.items():
        result[index] = bookie
    sequence = [where.get(bookie) or locations.get(bookie, DEFAULT_LOCATION) for bookie in result]
    zones = sorted({loc.zone for loc in where.values()} | {loc.zone for loc in fixed if loc is not None})
    placed = _judged(tuple(result), sequence, zones, where, write_quorum, ack_quorum, min_ack_zones,
                     f"to replace ensemble position(s) {wanted}")
    return placed._replace(bookies=chosen)


def _judged(ensemble: tuple[str, ...], sequence: Sequence[Location], zones: Sequence[str],
            where: Mapping[str, Location], write_quorum: int, ack_quorum: int, min_ack_zones: int,
            what: str) -> Placement:
    spread = spread_of(sequence, write_quorum, ack_quorum, min_ack_zones)
    warning = describe_shortfall(spread, write_quorum, ack_quorum, zones, min_ack_zones)
    if spread.ack_short and min_ack_zones > 1:
        per_zone = Counter(loc.zone for loc in where.values())
        counts = ", ".join(f"{zone}: {per_zone.get(zone, 0)}" for zone in zones) or "none"
        raise NotEnoughBookiesError(
            f"no placement {what} lets every ack quorum of {ack_quorum} bookie(s) span {min_ack_zones} zones "
            f"(min_ack_quorum_zones={min_ack_zones}, Qw={write_quorum}, docs/protocol.md P2): the best puts "
            f"{spread.zone_crowd} bookie(s) of one zone in a write quorum; eligible bookies per zone: {counts}; "
            "start bookies in more zones, raise the ack quorum, or lower min_ack_quorum_zones")
    return Placement(ensemble, spread, warning)


def _assign(sequence: Sequence[Location], positions: Iterable[int], where: Mapping[str, Location],
            rng: random.Random) -> dict[int, str]:
    """Random bookies of the right location for ``positions`` of ``sequence``, each used once."""
    positions = list(positions)
    by_location: dict[Location, list[str]] = defaultdict(list)
    for bookie in sorted(where):
        by_location[where[bookie]].append(bookie)
    needed = Counter(sequence[i] for i in positions)
    drawn = {loc: rng.sample(by_location[loc], count) for loc, count in sorted(needed.items())}
    return {i: drawn[sequence[i]].pop() for i in positions}


class _Done(Exception):
    """The ideal spread was reached, or the budget spent: stop searching."""


def _search(fixed: list[Location | None], capacity: Counter, write_quorum: int, ack_quorum: int,
            min_ack_zones: int, rng: random.Random, budget: int) -> list[Location]:
    """The location sequence with the best spread key that fills the open (None) positions of ``fixed``
    from ``capacity`` (location -> eligible bookies there); see the module docstring."""
    size = len(fixed)
    windows = window_positions(size, write_quorum)
    open_positions = [i for i, loc in enumerate(fixed) if loc is None]
    present = [loc for loc in fixed if loc is not None] + [loc for loc, n in capacity.items() if n > 0]
    ideal = ideal_key(write_quorum, len({loc.zone for loc in present}), len(set(present)))
    rank = {loc: r for r, loc in enumerate(rng.sample(sorted(capacity), len(capacity)))}
    sequence = list(fixed)
    left = Counter(capacity)
    best: list = [None, None]
    steps = [0]

    windows_of = {p: [w for w in windows if p in w] for p in open_positions}
    used_racks: Counter = Counter(loc for loc in fixed if loc is not None)

    def bound(position: int, parent: tuple) -> tuple:
        """(ack_short, zone_crowd) no completion can beat: the windows through ``position``, filled so far."""
        partial = [tuple(i for i in window if sequence[i] is not None) for window in windows_of[position]]
        spread = spread_of_windows(sequence, partial, ack_quorum, min_ack_zones)
        return (parent[0] or spread.ack_short, max(parent[1], spread.zone_crowd))

    def order(position: int) -> list[Location]:
        near = [sequence[q] for q in range(size) if sequence[q] is not None and q != position
                and min((q - position) % size, (position - q) % size) < write_quorum]
        zones, racks = Counter(loc.zone for loc in near), Counter(near)
        choices, seen = [], set()
        for loc in sorted((loc for loc, n in left.items() if n > 0),
                          key=lambda loc: (zones[loc.zone], racks[loc], -left[loc], rank[loc])):
            if not used_racks[loc]:  # unused racks of one zone with as many bookies left are interchangeable
                twin = (loc.zone, left[loc])
                if twin in seen:
                    continue
                seen.add(twin)
            choices.append(loc)
        return choices

    def descend(depth: int, parent: tuple) -> None:
        if depth == len(open_positions):
            key = spread_of(sequence, write_quorum, ack_quorum, min_ack_zones).key()
            if best[0] is None or key < best[0]:
                best[0], best[1] = key, list(sequence)
                if key == ideal:
                    raise _Done()
            return
        position = open_positions[depth]
        for loc in order(position):
            steps[0] += 1
            if steps[0] > budget and best[1] is not None:
                raise _Done()
            sequence[position] = loc
            left[loc] -= 1
            used_racks[loc] += 1
            lower = bound(position, parent)
            if best[0] is None or lower <= best[0][:2]:
                descend(depth + 1, lower)
            used_racks[loc] -= 1
            left[loc] += 1
            sequence[position] = None

    try:
        descend(0, (False, 0))
    except _Done:
        pass
    return best[1]


class ZoneAwarePlacement(RandomPlacement):
    """The default policy: zone- and rack-aware where bookies declare zones, uniform random otherwise (P4).

    ``choose_ensemble`` / ``replace_bookie`` (the ``PlacementPolicy`` seam, no locations known) are the
    uniform random choice; the client calls ``place_ensemble`` / ``place_replacements`` with the
    locations of the registered bookies and the ledger's quorums."""

    def place_ensemble(self, available: Iterable[str], size: int, exclude: Iterable[str], rng: random.Random,
                       **zone_args) -> Placement:
        return place_ensemble(available, size, exclude, rng, **zone_args)

    def place_replacements(self, ensemble: Sequence[str], indexes: Iterable[int], available: Iterable[str],
                           exclude: Iterable[str], rng: random.Random, **zone_args) -> Placement:
        return place_replacements(ensemble, indexes, available, exclude, rng, **zone_args)
