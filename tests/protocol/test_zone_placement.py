"""Zone- and rack-aware placement against brute force (docs/protocol.md P1-P4)."""
from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_ledger.errors import InvalidArgumentError, NotEnoughBookiesError
from pyspark_ledger.metadata.bookie_location import DEFAULT_LOCATION, Location
from pyspark_ledger.protocol.placement import choose_ensemble, replace_bookie
from pyspark_ledger.protocol.schedule import all_write_sets
from pyspark_ledger.protocol.zone_placement import ZoneAwarePlacement, place_ensemble, place_replacements
from pyspark_ledger.protocol.zone_spread import ack_quorums_span, spread_of


def quorum_combos(max_size: int):
    for size in range(1, max_size + 1):
        for write_quorum in range(1, size + 1):
            for ack_quorum in range(1, write_quorum + 1):
                yield size, write_quorum, ack_quorum


def layouts(max_bookies: int, max_zones: int):
    """Every multiset of zone sizes (a partition of n <= max_bookies into <= max_zones parts)."""
    def parts(n, most, zones):
        if n == 0:
            yield ()
            return
        if zones == 0:
            return
        for first in range(min(n, most), 0, -1):
            for rest in parts(n - first, first, zones - 1):
                yield (first,) + rest
    for n in range(1, max_bookies + 1):
        yield from parts(n, n, max_zones)


def cluster(sizes, racks_per_zone=1) -> dict[str, Location]:
    locations = {}
    for zone, count in enumerate(sizes):
        for i in range(count):
            locations[f"z{zone}-b{i}"] = Location(f"z{zone}", f"r{i % racks_per_zone}")
    return locations


def sequences(capacity: Counter, length: int):
    """Every sequence of ``length`` locations that ``capacity`` can fill (brute force)."""
    if length == 0:
        yield ()
        return
    for loc in sorted(capacity):
        if capacity[loc]:
            capacity[loc] -= 1
            for rest in sequences(capacity, length - 1):
                yield (loc,) + rest
            capacity[loc] += 1


def all_filled(capacity: Counter, size: int, fixed=None) -> list[list[Location]]:
    """Every way to fill the open positions of ``fixed`` (all of them if None) from ``capacity``."""
    open_positions = [i for i in range(size) if fixed is None or fixed[i] is None]
    found = []
    for filling in sequences(Counter(capacity), len(open_positions)):
        sequence = list(fixed) if fixed is not None else [None] * size
        for position, loc in zip(open_positions, filling):
            sequence[position] = loc
        found.append(sequence)
    return found


def best_key(capacity: Counter, size: int, write_quorum: int, ack_quorum: int, min_ack_zones: int,
             fixed=None, filled=None) -> tuple:
    filled = all_filled(capacity, size, fixed) if filled is None else filled
    return min(spread_of(sequence, write_quorum, ack_quorum, min_ack_zones).key() for sequence in filled)


def test_P2_the_ack_zone_rule_is_exactly_every_ack_quorum_spanning_the_zones():
    """sum of the m-1 largest zone counts <= Qa-1  <=>  every Qa bookies of the write set are in >= m zones."""
    for counts in itertools.chain.from_iterable(itertools.product(range(4), repeat=z) for z in range(1, 4)):
        members = [zone for zone, n in enumerate(counts) for _ in range(n)]
        for ack_quorum in range(1, len(members) + 1):
            for min_ack_zones in range(1, 5):
                every = all(len(set(quorum)) >= min_ack_zones
                            for quorum in itertools.combinations(members, ack_quorum))
                assert ack_quorums_span(counts, ack_quorum, min_ack_zones) == every, (counts, ack_quorum,
                                                                                      min_ack_zones)


def test_P1_spread_reads_the_write_sets_of_the_schedule():
    a, b = Location("a"), Location("b")
    ensemble = [a, a, b, b]
    spread = spread_of(ensemble, 2)
    windows = [[ensemble[i] for i in ws] for ws in all_write_sets(4, 2)]
    assert spread.zone_reach == min(len({loc.zone for loc in w}) for w in windows) == 1
    assert spread.zone_crowd == 2 and spread_of([a, b, a, b], 2).zone_reach == 2


@pytest.mark.parametrize("sizes", list(layouts(6, 3)), ids=str)
def test_P1_P3_new_ensembles_spread_as_well_as_brute_force_for_every_quorum(sizes):
    """Every layout of <= 6 bookies in <= 3 zones, every E/Qw/Qa: the spread equals the best any ensemble
    has; with min_ack_zones 2 or 3 the placement is refused exactly when no ensemble meets the rule."""
    locations = cluster(sizes)
    capacity = Counter(locations.values())
    filled = {}
    for size, write_quorum, ack_quorum in quorum_combos(len(locations)):
        if size not in filled:
            filled[size] = all_filled(capacity, size)
        for min_ack_zones in (1, 2, 3):
            best = best_key(capacity, size, write_quorum, ack_quorum, min_ack_zones, filled=filled[size])
            args = dict(locations=locations, write_quorum=write_quorum, ack_quorum=ack_quorum,
                        min_ack_zones=min_ack_zones)
            case = (sizes, size, write_quorum, ack_quorum, min_ack_zones)
            if best[0] and min_ack_zones > 1:
                with pytest.raises(NotEnoughBookiesError, match="zones"):
                    place_ensemble(list(locations), size, (), random.Random(7), **args)
                continue
            placed = place_ensemble(list(locations), size, (), random.Random(7), **args)
            assert len(set(placed.bookies)) == size, case
            assert placed.spread.key() == best, case
            assert placed.spread == spread_of([locations[b] for b in placed.bookies], write_quorum, ack_quorum,
                                              min_ack_zones), case
            zones = len(sizes)
            if placed.spread.zone_reach < min(write_quorum, zones) or placed.spread.ack_short:
                assert placed.warning and "P3" in placed.warning, case
            else:
                assert placed.warning is None, case


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3), st.integers(1, 2), st.data())
def test_P1_racks_and_exclusions_against_brute_force(sizes, racks, data):
    """Up to 7 bookies in up to 3 zones of up to 2 racks, some excluded: zones first, racks second."""
    locations = cluster(sizes, racks)
    bookies = sorted(locations)
    exclude = data.draw(st.sets(st.sampled_from(bookies), max_size=max(len(bookies) - 1, 0)))
    eligible = [b for b in bookies if b not in exclude]
    size = data.draw(st.integers(1, len(eligible)))
    write_quorum = data.draw(st.integers(1, size))
    ack_quorum = data.draw(st.integers(1, write_quorum))
    placed = place_ensemble(bookies, size, exclude, random.Random(data.draw(st.integers(0, 99))),
                            locations=locations, write_quorum=write_quorum, ack_quorum=ack_quorum)
    assert not set(placed.bookies) & exclude and len(set(placed.bookies)) == size
    capacity = Counter(locations[b] for b in eligible)
    assert placed.spread.key() == best_key(capacity, size, write_quorum, ack_quorum, 1)


@pytest.mark.parametrize("sizes", [(3, 3), (2, 2, 2), (4, 2), (3, 2, 1), (5, 1)], ids=str)
def test_P1_replacements_keep_the_best_spread_brute_force(sizes):
    """Replace one or two positions of a placed ensemble: the result is as good as any choice of replacements,
    and the enforce mode refuses exactly when no choice meets the rule."""
    locations = cluster(sizes)
    for size, write_quorum, ack_quorum in quorum_combos(min(len(locations) - 1, 5)):
        ensemble = place_ensemble(list(locations), size, (), random.Random(size), locations=locations,
                                  write_quorum=write_quorum, ack_quorum=ack_quorum).bookies
        spare = len(locations) - size
        for indexes in [(0,), (size - 1,), (0, size - 1)]:
            indexes = tuple(sorted(set(indexes)))
            if len(indexes) > spare:
                continue
            fixed = [None if i in indexes else locations[b] for i, b in enumerate(ensemble)]
            capacity = Counter(loc for b, loc in locations.items() if b not in ensemble)
            for min_ack_zones in (1, 2):
                best = best_key(capacity, size, write_quorum, ack_quorum, min_ack_zones, fixed)
                args = dict(locations=locations, write_quorum=write_quorum, ack_quorum=ack_quorum,
                            min_ack_zones=min_ack_zones)
                if best[0] and min_ack_zones > 1:
                    with pytest.raises(NotEnoughBookiesError, match="zones"):
                        place_replacements(ensemble, indexes, list(locations), (), random.Random(3), **args)
                    continue
                placed = place_replacements(ensemble, indexes, list(locations), (), random.Random(3), **args)
                assert set(placed.bookies) == set(indexes)
                assert not set(placed.bookies.values()) & set(ensemble)
                assert len(set(placed.bookies.values())) == len(indexes)
                assert placed.spread.key() == best, (sizes, ensemble, indexes, write_quorum, ack_quorum)


def test_P4_without_zones_the_choices_are_exactly_the_uniform_ones():
    """Bookies that declare no zone (or all the same one) are placed as before zones existed, same rng."""
    bookies = [f"b{i}" for i in range(8)]
    for locations in ({}, {b: Location("eu", "r1") for b in bookies}):
        for seed in range(30):
            placed = place_ensemble(bookies, 4, {"b2"}, random.Random(seed), locations=locations,
                                    write_quorum=3, ack_quorum=2)
            assert placed.bookies == choose_ensemble(bookies, 4, {"b2"}, random.Random(seed))
            assert placed.warning is None
            ensemble = placed.bookies
            rng, expected = random.Random(seed), {}
            current, excluded = list(ensemble), {"b2", ensemble[0], ensemble[2]}
            for index in (0, 2):  # what the client did before zones: one index at a time
                expected[index] = current[index] = replace_bookie(current, index, bookies, excluded, rng)
                excluded.add(expected[index])
            got = place_replacements(ensemble, (2, 0), bookies, {"b2", ensemble[0], ensemble[2]},
                                     random.Random(seed), locations=locations, write_quorum=3, ack_quorum=2)
            assert got.bookies == expected


def test_P3_one_zone_with_enforcement_is_refused_naming_the_zone():
    locations = {f"b{i}": Location("only") for i in range(5)}
    with pytest.raises(NotEnoughBookiesError, match=r"only: 5"):
        place_ensemble(list(locations), 3, (), random.Random(0), locations=locations, write_quorum=3,
                       ack_quorum=2, min_ack_zones=2)
    placed = place_ensemble(list(locations), 3, (), random.Random(0), locations=locations, write_quorum=3,
                            ack_quorum=2)
    assert placed.warning is None  # one zone: the best spread there is; nothing to warn about


def test_P2_two_zones_of_three_with_qw4_qa3_survive_a_zone_and_qa2_does_not():
    locations = cluster((3, 3))
    safe = place_ensemble(list(locations), 4, (), random.Random(1), locations=locations, write_quorum=4,
                          ack_quorum=3, min_ack_zones=2)
    assert Counter(locations[b].zone for b in safe.bookies) == {"z0": 2, "z1": 2}
    with pytest.raises(NotEnoughBookiesError, match="z0: 3, z1: 3"):
        place_ensemble(list(locations), 3, (), random.Random(1), locations=locations, write_quorum=3,
                       ack_quorum=2, min_ack_zones=2)


def test_bad_arguments_are_refused():
    locations = cluster((2, 2))
    with pytest.raises(InvalidArgumentError, match="min_ack_zones"):
        place_ensemble(list(locations), 2, (), random.Random(0), locations=locations, write_quorum=2,
                       ack_quorum=2, min_ack_zones=0)
    with pytest.raises(NotEnoughBookiesError, match="need 5 bookie"):
        place_ensemble(list(locations), 5, (), random.Random(0), locations=locations, write_quorum=2,
                       ack_quorum=2)
    with pytest.raises(InvalidArgumentError, match="bookie index"):
        place_replacements(("z0-b0", "z1-b0"), (2,), list(locations), (), random.Random(0), locations=locations,
                           write_quorum=2, ack_quorum=1)


def test_policy_object_serves_both_seams():
    policy = ZoneAwarePlacement()
    bookies = [f"b{i}" for i in range(5)]
    assert policy.choose_ensemble(bookies, 3, (), random.Random(4)) == choose_ensemble(bookies, 3, (),
                                                                                      random.Random(4))
    placed = policy.place_ensemble(bookies, 3, (), random.Random(4), locations={}, write_quorum=3, ack_quorum=2)
    assert placed.spread.zone_reach == 1 and DEFAULT_LOCATION.zone == "default-zone"
