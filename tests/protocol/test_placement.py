"""Ensemble selection and replacement (docs/protocol.md W2-W4)."""
from __future__ import annotations

import random

import pytest

from pyspark_ledger.errors import InvalidArgumentError, NotEnoughBookiesError
from pyspark_ledger.protocol.placement import (
    PlacementPolicy, RandomPlacement, apply_replacements, choose_ensemble, replace_bookie, replace_bookies,
    replacement_exclusions,
)

BOOKIES = [f"b{i}" for i in range(6)]


def test_choose_ensemble_is_distinct_excludes_and_is_deterministic_per_seed():
    first = choose_ensemble(BOOKIES, 4, {"b1"}, random.Random(3))
    assert len(set(first)) == 4 and "b1" not in first
    assert choose_ensemble(reversed(BOOKIES), 4, {"b1"}, random.Random(3)) == first


def test_choose_ensemble_not_enough_bookies_names_the_counts():
    with pytest.raises(NotEnoughBookiesError) as info:
        choose_ensemble(BOOKIES[:4], 4, {"b0", "zz"}, random.Random(0))
    message = str(info.value)
    assert "need 4 bookie(s)" in message and "only 3 eligible" in message
    assert "4 available" in message and "1 of them excluded (b0)" in message


def test_replace_bookie_picks_outside_the_ensemble_and_exclusions():
    ensemble = ("b0", "b1", "b2")
    for seed in range(20):
        chosen = replace_bookie(ensemble, 1, BOOKIES, {"b3"}, random.Random(seed))
        assert chosen in {"b4", "b5"}


def test_W4_no_spare_bookie_raises_not_enough_bookies():
    with pytest.raises(NotEnoughBookiesError, match=r"replace ensemble position\(s\) \[1\]"):
        replace_bookie(("b0", "b1", "b2"), 1, ["b0", "b1", "b2"], (), random.Random(0))


def test_replace_two_bookies_at_once_are_distinct():
    chosen = replace_bookies(("b0", "b1", "b2"), [0, 2], BOOKIES, (), random.Random(5))
    assert set(chosen) == {0, 2} and len(set(chosen.values())) == 2
    assert not set(chosen.values()) & {"b0", "b1", "b2"}


def test_bad_arguments_are_refused():
    with pytest.raises(InvalidArgumentError, match="ensemble size"):
        choose_ensemble(BOOKIES, 0, (), random.Random(0))
    with pytest.raises(InvalidArgumentError, match="bookie index"):
        replace_bookie(("b0", "b1"), 2, BOOKIES, (), random.Random(0))
    with pytest.raises(InvalidArgumentError, match="twice"):
        apply_replacements(("b0", "b1"), {0: "b1"})


def test_random_placement_satisfies_the_policy_protocol():
    policy: PlacementPolicy = RandomPlacement()
    ensemble = policy.choose_ensemble(BOOKIES, 3, (), random.Random(1))
    assert policy.replace_bookie(ensemble, 0, BOOKIES, (), random.Random(1)) not in ensemble


def test_replacement_exclusions_give_bookies_that_failed_before_a_second_chance_last():
    assert replacement_exclusions(["a"], ["b", "c"]) == (frozenset("abc"), frozenset("a"))
    assert replacement_exclusions(["a", "b"], ["a"]) == (frozenset("ab"),)  # nothing extra: one round
    assert replacement_exclusions([], []) == (frozenset(),)
