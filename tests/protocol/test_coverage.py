"""Quorum coverage against brute force, and the per-entry present/absent/unknown rule (docs/protocol.md Q3, A2)."""
from __future__ import annotations

import itertools
import random

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.protocol.answers import AnswerKind, kind_for_status
from pyspark_ledger.protocol.coverage import (
    CoverageTracker, EntryOutcome, EntryTally, can_still_be_covered, is_covered,
)

P, N, U = AnswerKind.POSITIVE, AnswerKind.NEGATIVE, AnswerKind.UNKNOWN


def configs(max_e=6):
    for e in range(1, max_e + 1):
        for qw in range(1, e + 1):
            for qa in range(1, qw + 1):
                yield e, qw, qa


def subsets(e):
    for mask in range(1 << e):
        yield frozenset(i for i in range(e) if mask >> i & 1)


def ack_quorums(e, qw, qa):
    """Every Qa-subset of every write set: the bookie sets that could confirm an entry."""
    for start in range(e):
        members = [(start + i) % e for i in range(qw)]
        yield from itertools.combinations(members, qa)


def brute_covered(e, qw, qa, responders):
    """Covered <=> no ack quorum is made entirely of non-responders."""
    return not any(all(i not in responders for i in quorum) for quorum in ack_quorums(e, qw, qa))


def test_coverage_matches_brute_force_for_every_e_up_to_6_and_every_subset():
    checked = 0
    for e, qw, qa in configs():
        for responders in subsets(e):
            assert is_covered(e, qw, qa, responders) == brute_covered(e, qw, qa, responders), (
                e, qw, qa, sorted(responders))
            checked += 1
    assert checked == sum((1 << e) * e * (e + 1) // 2 for e in range(1, 7))


def test_impossible_matches_brute_force_for_every_e_up_to_6_and_every_failed_set():
    for e, qw, qa in configs():
        for failed in subsets(e):
            best = frozenset(range(e)) - failed  # everyone else answers
            assert can_still_be_covered(e, qw, qa, failed) == brute_covered(e, qw, qa, best)


def test_tracker_agrees_with_function_in_every_order_prefix():
    rng = random.Random(20240611)
    for e, qw, qa in configs():
        for _ in range(5):
            order = list(range(e))
            rng.shuffle(order)
            kinds = {i: rng.choice([P, N, U]) for i in order}
            tracker = CoverageTracker(e, qw, qa)
            heard, failed = set(), set()
            for index in order:
                covered = tracker.record(index, kinds[index])
                (failed if kinds[index] is U else heard).add(index)
                assert covered == is_covered(e, qw, qa, heard)
                assert tracker.impossible == (not can_still_be_covered(e, qw, qa, failed))
            assert tracker.all_answered


def test_L1_answers_from_bookies_0_and_2_do_not_cover_e4_qw3_qa2():
    tracker = CoverageTracker(4, 3, 2)
    tracker.record(0, P)
    assert not tracker.record(2, P)
    # {1, 2, 3} is a write quorum; {1, 3} is an ack quorum nobody heard from.
    assert not brute_covered(4, 3, 2, {0, 2})
    assert tracker.record(1, N)


def test_a_later_explicit_answer_replaces_an_unknown():
    tracker = CoverageTracker(3, 3, 2)
    tracker.record(0, U)
    tracker.record(0, P)
    assert tracker.responders == {0} and tracker.failed == frozenset()
    assert tracker.record(1, P)


def test_wire_statuses_classify_and_unknown_is_never_negative():
    assert kind_for_status("OK") is P
    assert kind_for_status("NO_SUCH_ENTRY") is N and kind_for_status("NO_SUCH_LEDGER") is N
    for status in ("FENCED", "IO_ERROR", "UNAUTHORIZED", "STATUS_UNSPECIFIED", "TIMEOUT", "SOMETHING_NEW"):
        assert kind_for_status(status) is U


def expected_outcome(qw, qa, answers):
    """Independent statement of the rule for a complete prefix of answers."""
    seen = []
    for kind in answers:
        seen.append(kind)
        if kind is P:
            return EntryOutcome.PRESENT
        if seen.count(N) >= qw - qa + 1:
            return EntryOutcome.ABSENT
    return EntryOutcome.UNKNOWN if len(seen) == qw else EntryOutcome.PENDING


def test_entry_tally_every_answer_sequence_up_to_qw_4():
    for qw in range(1, 5):
        for qa in range(1, qw + 1):
            for length in range(qw + 1):
                for answers in itertools.product((P, N, U), repeat=length):
                    tally = EntryTally(range(qw), qw, qa)
                    outcome = EntryOutcome.PENDING
                    for index, kind in enumerate(answers):
                        outcome = tally.record(index, kind)
                    assert outcome == expected_outcome(qw, qa, answers), (qw, qa, answers)


def test_absent_needs_qw_minus_qa_plus_one_negatives_unknowns_never_count():
    tally = EntryTally((0, 1, 2), 3, 2)
    assert tally.record(0, N) is EntryOutcome.PENDING
    assert tally.record(1, U) is EntryOutcome.PENDING
    assert tally.record(2, U) is EntryOutcome.UNKNOWN
    assert tally.negatives == 1


def test_entry_tally_refuses_a_bookie_outside_the_write_set():
    with pytest.raises(InvalidArgumentError, match="not in this entry's write set"):
        EntryTally((1, 2), 2, 1).record(0, P)
