"""How an ensemble's write quorums spread over zones and racks: the measure placement optimises.

docs/protocol.md P1-P3. An ensemble is judged by its write sets (Q2: the Qw
consecutive positions starting at each index, wrapping around) and the
``Location`` (zone, rack) of the bookie at each position. ``Spread`` holds
the worst write set's figures; ``Spread.key()`` orders ensembles, lower
better:

1. whether some write set breaks the ack-zone rule (P2) for the wanted
   number of zones per ack quorum (``min_ack_zones``; 1 asks nothing);
2. ``zone_crowd``: the most bookies of one zone in any write set (fewer is
   better: losing that zone takes that many copies of an entry);
3. ``zone_reach``: the fewest distinct zones of any write set (more is better);
4. ``rack_crowd`` and ``rack_reach``: the same for racks (a rack is a
   (zone, rack) pair: racks of different zones never coincide).

Pure: no I/O, no randomness.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from pyspark_ledger.metadata.bookie_location import Location


class Spread(NamedTuple):
    """The worst write set's figures of an ensemble (see the module docstring)."""

    ack_short: bool
    zone_crowd: int
    zone_reach: int
    rack_crowd: int
    rack_reach: int

    def key(self) -> tuple:
        """Order of preference: lower is better."""
        return (self.ack_short, self.zone_crowd, -self.zone_reach, self.rack_crowd, -self.rack_reach)


def ack_quorums_span(zone_counts: Iterable[int], ack_quorum: int, min_ack_zones: int) -> bool:
    """P2: whether every ``ack_quorum`` bookies of a write set, whose zones hold ``zone_counts`` of its
    bookies, are in at least ``min_ack_zones`` zones.

    An ack quorum fits in m - 1 zones exactly when the m - 1 largest zone counts add up to Qa or more
    (take the acks from the most crowded zones first), so the rule is: sum of the m - 1 largest
    counts <= Qa - 1. For m = 2: no zone holds Qa or more bookies of the write set."""
    if min_ack_zones <= 1:
        return True
    largest = sorted(zone_counts, reverse=True)[:min_ack_zones - 1]
    return sum(largest) <= ack_quorum - 1


def window_positions(ensemble_size: int, write_quorum: int) -> tuple[tuple[int, ...], ...]:
    """The distinct write sets (Q2) as position tuples: one when Qw = E, else E of them."""
    starts = range(1) if write_quorum >= ensemble_size else range(ensemble_size)
    return tuple(tuple((start + i) % ensemble_size for i in range(write_quorum)) for start in starts)


def spread_of(locations: Sequence[Location], write_quorum: int, ack_quorum: int = 1,
              min_ack_zones: int = 1) -> Spread:
    """The ``Spread`` of an ensemble whose position i holds a bookie at ``locations[i]``."""
    return spread_of_windows(locations, window_positions(len(locations), write_quorum), ack_quorum, min_ack_zones)


def spread_of_windows(locations: Sequence[Location], windows: Iterable[Sequence[int]], ack_quorum: int,
                      min_ack_zones: int) -> Spread:
    """``spread_of`` over given windows (position tuples), e.g. the ones filled so far during a search."""
    short, zone_crowd, zone_reach, rack_crowd, rack_reach = False, 0, None, 0, None
    for window in windows:
        racks = [locations[i] for i in window]
        zones = [rack.zone for rack in racks]
        zone_counts = [zones.count(zone) for zone in set(zones)]
        rack_counts = [racks.count(rack) for rack in set(racks)]
        short = short or not ack_quorums_span(zone_counts, ack_quorum, min_ack_zones)
        zone_crowd = max(zone_crowd, max(zone_counts, default=0))
        rack_crowd = max(rack_crowd, max(rack_counts, default=0))
        zone_reach = len(zone_counts) if zone_reach is None else min(zone_reach, len(zone_counts))
        rack_reach = len(rack_counts) if rack_reach is None else min(rack_reach, len(rack_counts))
    return Spread(short, zone_crowd, zone_reach or 0, rack_crowd, rack_reach or 0)


def ideal_key(write_quorum: int, zones: int, racks: int) -> tuple:
    """A bound no ensemble beats: Qw spread evenly over ``zones`` zones and ``racks`` racks."""
    return (False, -(-write_quorum // max(zones, 1)), -min(write_quorum, zones),
            -(-write_quorum // max(racks, 1)), -min(write_quorum, racks))


def describe_shortfall(spread: Spread, write_quorum: int, ack_quorum: int, zones: Sequence[str],
                       min_ack_zones: int) -> str | None:
    """Why ``spread`` falls short of what these zones could give (P3), or None if it does not."""
    wanted = min(write_quorum, len(zones))
    problems = []
    if spread.zone_reach < wanted:
        problems.append(f"some write quorum spans only {spread.zone_reach} of the {wanted} zone(s) wanted")
    if spread.ack_short:
        problems.append(f"some ack quorum of {ack_quorum} bookie(s) can lie within fewer than {min_ack_zones} "
                        f"zone(s) (a write quorum holds {spread.zone_crowd} bookie(s) of one zone)")
    if not problems:
        return None
    return (f"{'; '.join(problems)} -- zones with eligible bookies: {', '.join(zones) or 'none'}"
            " (docs/protocol.md P3)")
