"""Striped reads (pyspark_ledger.protocol.stripes): every entry asked once, of a replica that stores it, in order."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from pyspark_ledger.errors import InvalidArgumentError, InvalidConfigurationError
from pyspark_ledger.protocol.read_rules import ReadBatch
from pyspark_ledger.protocol.reads import ReadPlan
from pyspark_ledger.protocol.schedule import write_set
from pyspark_ledger.protocol.stripes import (merged_prefix, split_batch, stripe_rest, stripe_size,
                                             stripes_per_batch)


def ensemble(size: int) -> tuple[str, ...]:
    return tuple(f"b{index}" for index in range(size))


def entries_of(stripe: ReadBatch) -> list[int]:
    return list(range(stripe.first_entry_id, stripe.last_entry_id + 1, stripe.step))


def check_split(first: int, last: int, size: int, write_quorum: int) -> tuple[ReadBatch, ...]:
    batch = ReadBatch(first, last, ensemble(size))
    stripes = split_batch(batch, write_quorum)
    asked = [entry for stripe in stripes for entry in entries_of(stripe)]
    assert sorted(asked) == list(range(first, last + 1)), "every entry exactly once"
    for stripe in stripes:
        assert stripe.ensemble == batch.ensemble
        assert first <= stripe.first_entry_id <= stripe.last_entry_id <= last
        assert (stripe.last_entry_id - stripe.first_entry_id) % stripe.step == 0, "last is an entry of the stripe"
        assert stripe_size(stripe) == len(entries_of(stripe))
        replicas = set(ReadPlan(stripe.first_entry_id, stripe.ensemble, write_quorum, 1).replicas)
        for entry in entries_of(stripe):  # whoever the plan asks (first or a fallback) stores every entry asked
            assert {stripe.ensemble[i] for i in write_set(entry, size, write_quorum)} == replicas
    first_asked = [ReadPlan(s.first_entry_id, s.ensemble, write_quorum, 1).first().bookie for s in stripes]
    assert len(set(first_asked)) == len(first_asked), "stripes start on different bookies"
    if size == write_quorum:
        assert stripes == (batch,), "every bookie stores every entry: one contiguous read"
    else:
        assert len(stripes) == min(size, last - first + 1)
        assert all(stripe.step == size for stripe in stripes)
    return stripes


def test_split_exhaustively_small_ensembles():
    for size in range(1, 8):
        for write_quorum in range(1, size + 1):
            for first in range(0, 12):
                for count in range(1, 3 * size + 3):
                    check_split(first, first + count - 1, size, write_quorum)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12).flatmap(lambda size: st.tuples(st.just(size), st.integers(1, size))),
       st.integers(0, 2**39 - 10_000), st.integers(1, 600))
def test_split_property(quorums, first, count):
    size, write_quorum = quorums
    check_split(first, first + count - 1, size, write_quorum)


def test_split_e5_qw3_example():
    stripes = split_batch(ReadBatch(10, 21, ensemble(5)), 3)
    assert [entries_of(s) for s in stripes] == [[10, 15, 20], [11, 16, 21], [12, 17], [13, 18], [14, 19]]
    assert [ReadPlan(s.first_entry_id, s.ensemble, 3, 2).replicas for s in stripes] == [
        ("b0", "b1", "b2"), ("b1", "b2", "b3"), ("b2", "b3", "b4"), ("b3", "b4", "b0"), ("b4", "b0", "b1")]


def test_stripes_per_batch():
    for size in range(1, 9):
        for write_quorum in range(1, size + 1):
            expected = len(split_batch(ReadBatch(0, 100, ensemble(size)), write_quorum))
            assert stripes_per_batch(size, write_quorum) == expected
    with pytest.raises(InvalidConfigurationError):
        stripes_per_batch(3, 4)


def test_split_refuses_what_is_not_a_batch():
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        split_batch(ReadBatch(0, 9, ensemble(5), 5), 3)
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        split_batch(ReadBatch(5, 4, ensemble(5)), 3)
    with pytest.raises(InvalidConfigurationError, match="write_quorum"):
        split_batch(ReadBatch(0, 4, ensemble(3)), 4)


def test_merge_restores_order_of_complete_answers():
    for size, write_quorum, first, count in itertools.product(range(1, 7), range(1, 7), range(0, 7), range(1, 20)):
        if write_quorum > size:
            continue
        batch = ReadBatch(first, first + count - 1, ensemble(size))
        stripes = split_batch(batch, write_quorum)
        assert merged_prefix(batch, [entries_of(s) for s in stripes]) == list(range(first, first + count))


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 9), st.integers(0, 1000), st.integers(1, 60), st.data())
def test_merge_of_short_answers_stops_at_the_first_entry_not_read(size, first, count, data):
    batch = ReadBatch(first, first + count - 1, ensemble(size))
    stripes = split_batch(batch, 1)
    answers = [entries_of(s)[:data.draw(st.integers(0, stripe_size(s)))] for s in stripes]
    read = {entry for answer in answers for entry in answer}
    expected = list(itertools.takewhile(read.__contains__, range(first, first + count)))
    assert merged_prefix(batch, answers) == expected


def test_merge_refuses_a_wrong_number_of_stripes():
    with pytest.raises(InvalidArgumentError, match="stripes"):
        merged_prefix(ReadBatch(0, 1, ensemble(5)), [[0], [1], []])
    with pytest.raises(InvalidArgumentError, match="stripes"):
        merged_prefix(ReadBatch(0, 1, ensemble(5)), [])


def test_rest_of_a_stripe():
    stripe = ReadBatch(3, 23, ensemble(5), 5)
    assert stripe_rest(stripe, 0) == stripe
    assert stripe_rest(stripe, 2) == ReadBatch(13, 23, ensemble(5), 5)
    assert stripe_rest(stripe, 5) is None
    for read in (-1, 6):
        with pytest.raises(InvalidArgumentError, match="read of a stripe"):
            stripe_rest(stripe, read)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 9), st.integers(0, 1000), st.integers(1, 80), st.lists(st.integers(1, 7), min_size=1))
def test_reading_stripes_in_short_rounds_reads_each_entry_once(size, first, count, rounds):
    """Stripes continued with stripe_rest after answers of any length cover the batch once, in order."""
    batch = ReadBatch(first, first + count - 1, ensemble(size))
    answers = []
    for stripe in split_batch(batch, 1):
        read, rest, turn = [], stripe, 0
        while rest is not None:
            got = entries_of(rest)[:rounds[turn % len(rounds)]]
            read += got
            rest, turn = stripe_rest(rest, len(got)), turn + 1
        answers.append(read)
    assert merged_prefix(batch, answers) == list(range(first, first + count))
