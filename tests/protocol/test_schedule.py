"""Round-robin write sets (docs/protocol.md Q2)."""
from __future__ import annotations

import pytest

from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError
from pyspark_ledger.protocol.schedule import (
    Quorums, all_write_sets, distinct_write_sets, is_in_write_set, write_set, write_set_bookies,
)

# E = 4, Qw = 3, Qa = 2, an ensemble of bookies named B1..B4, entries 0..5.
SEED_TABLE = {
    0: ("B1", "B2", "B3"),
    1: ("B2", "B3", "B4"),
    2: ("B3", "B4", "B1"),
    3: ("B4", "B1", "B2"),
    4: ("B1", "B2", "B3"),
    5: ("B2", "B3", "B4"),
}


@pytest.mark.parametrize("entry_id,expected", sorted(SEED_TABLE.items()))
def test_seed_write_quorum_table(entry_id, expected):
    assert write_set_bookies(entry_id, ("B1", "B2", "B3", "B4"), 3) == expected


def test_write_set_formula_and_membership_agree():
    for e_size in range(1, 7):
        for qw in range(1, e_size + 1):
            for entry_id in range(3 * e_size):
                members = write_set(entry_id, e_size, qw)
                assert members == tuple((entry_id + i) % e_size for i in range(qw))
                for index in range(e_size):
                    assert is_in_write_set(entry_id, index, e_size, qw) == (index in members)


def test_there_are_e_distinct_write_quorums_or_one_without_striping():
    assert len(distinct_write_sets(4, 3)) == 4
    assert distinct_write_sets(3, 3) == (frozenset({0, 1, 2}),)
    assert all_write_sets(4, 3)[2] == (2, 3, 0)


def test_quorums_threshold_and_validation():
    assert Quorums(4, 3, 2).coverage_threshold == 2
    assert Quorums(3, 3, 3).coverage_threshold == 1
    with pytest.raises(InvalidConfigurationError, match="ensemble_size >= write_quorum"):
        Quorums(2, 3, 2)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_bad_entry_ids_are_refused_with_the_value(bad):
    with pytest.raises(InvalidArgumentError, match="entry id"):
        write_set(bad, 3, 2)


def test_bad_bookie_index_is_refused():
    with pytest.raises(InvalidArgumentError, match="bookie index must be in 0..2"):
        is_in_write_set(0, 3, 3, 2)
