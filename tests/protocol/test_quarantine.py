"""The quarantine and ensemble-change back-off rules (issue 12, part 9): exhaustive and property tests."""
from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.protocol.quarantine import (ChangeBackoff, QuarantineRule, Sentence, after_failure,
                                                change_delay, exclusion_rounds, forgotten, max_changes,
                                                quarantined, streak_after_change)

RULE = QuarantineRule(base_s=5.0, max_s=40.0)
BACKOFF = ChangeBackoff()


# --- quarantine ---------------------------------------------------------------------------
def test_first_failure_quarantines_for_base_then_doubles_up_to_max():
    sentence = after_failure(None, 100.0, RULE)
    assert sentence == Sentence(1, 105.0)
    durations = []
    now = 100.0
    for _ in range(6):
        now = sentence.until + 1.0  # fails again soon after each quarantine ended
        sentence = after_failure(sentence, now, RULE)
        durations.append(sentence.until - now)
    assert durations == [10.0, 20.0, 40.0, 40.0, 40.0, 40.0]


def test_failures_during_a_quarantine_do_not_lengthen_it():
    sentence = after_failure(None, 0.0, RULE)
    for now in (0.0, 1.0, 4.999):
        assert after_failure(sentence, now, RULE) is sentence


def test_a_failure_long_after_the_quarantine_starts_over():
    sentence = Sentence(4, 10.0)
    assert after_failure(sentence, 10.0 + RULE.max_s, RULE) == Sentence(1, 10.0 + RULE.max_s + RULE.base_s)
    assert after_failure(sentence, 10.0 + RULE.max_s - 0.1, RULE).strikes == 5


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=40))
def test_quarantine_is_always_between_base_and_max_and_never_shortened(times):
    sentence = None
    for now in sorted(times):
        new = after_failure(sentence, now, RULE)
        if new is sentence:
            assert now < sentence.until  # only a failure during the quarantine keeps it as it is
        else:
            # compared as sums, the way the rule computes them: ``until - now`` can round below base_s
            assert now + RULE.base_s <= new.until <= now + RULE.max_s
        if sentence is not None:
            assert new.until >= sentence.until  # a failure never releases a bookie earlier
        sentence = new


def test_quarantined_lists_only_current_ones_in_release_order():
    sentences = {"c": Sentence(1, 30.0), "a": Sentence(1, 20.0), "b": Sentence(2, 20.0), "d": Sentence(1, 9.0)}
    assert quarantined(sentences, 10.0) == ("a", "b", "c")
    assert quarantined(sentences, 20.0) == ("c",)
    assert quarantined(sentences, 30.0) == ()
    assert forgotten(sentences, 9.0 + RULE.max_s, RULE) == ("d",)
    assert forgotten(sentences, 8.9 + RULE.max_s, RULE) == ()


def test_exclusion_rounds_release_quarantined_bookies_one_at_a_time_in_release_order():
    rounds = exclusion_rounds({"f"}, {"p"}, ("q1", "q2"))
    assert rounds == (frozenset({"f", "p", "q1", "q2"}), frozenset({"f", "q1", "q2"}), frozenset({"f", "q2"}),
                      frozenset({"f"}))


def test_exclusion_rounds_exhaustively_over_small_sets():
    ids = ("a", "b", "c", "d")
    subsets = [frozenset(c) for n in range(len(ids) + 1) for c in itertools.combinations(ids, n)]
    for failing, before in itertools.product(subsets, repeat=2):
        for n in range(len(ids) + 1):
            for order in itertools.permutations(ids, n):
                rounds = exclusion_rounds(failing, before, order)
                assert rounds[0] == failing | before | set(order)  # strongest first
                assert rounds[-1] == failing  # the last round bans only the failing ones: always progress
                assert len(set(rounds)) == len(rounds)
                assert all(failing <= excluded for excluded in rounds)
                assert all(later <= earlier for earlier, later in zip(rounds, rounds[1:]))
                waiting = [b for b in order if b not in failing]
                for excluded in rounds:  # quarantined bookies come back in release order, never out of it
                    released = [b for b in waiting if b not in excluded]
                    assert released == waiting[:len(released)]


# --- ensemble change back-off -------------------------------------------------------------
def test_change_delays_of_a_streak():
    assert change_delay(0, None, BACKOFF) == 0.0
    assert change_delay(1, None, BACKOFF) == 0.0
    gaps = [change_delay(streak, 0.0, BACKOFF) for streak in range(1, 9)]
    assert gaps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0])
    assert change_delay(3, 0.3, BACKOFF) == pytest.approx(0.1)
    assert change_delay(3, 0.5, BACKOFF) == 0.0
    assert change_delay(50, BACKOFF.quiet_s, BACKOFF) == 0.0  # the streak is over


def test_streak_counts_changes_closer_than_quiet_s():
    assert streak_after_change(7, None, BACKOFF) == 1
    assert streak_after_change(7, BACKOFF.quiet_s, BACKOFF) == 1
    assert streak_after_change(7, BACKOFF.quiet_s - 0.01, BACKOFF) == 8


def test_the_stated_bound():
    assert [max_changes(t, BACKOFF) for t in (0.0, 0.09, 0.1, 0.3, 0.7, 1.49, 1.5, 3.0, 10.0)] == \
        [1, 1, 2, 3, 4, 4, 5, 6, 13]
    for tenth in range(15, 600):
        assert max_changes(tenth / 10, BACKOFF) == 5 + math.floor(tenth / 10 - 1.5 + 1e-9)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=0.5, allow_nan=False), min_size=1, max_size=300))
def test_a_writer_changing_as_soon_as_allowed_never_exceeds_the_bound(failure_gaps):
    """Failures at arbitrary times; each change waits for ``change_delay``; count changes against the bound."""
    now, streak, last, changes = 0.0, 0, None, []
    for gap in failure_gaps:
        now += gap  # a bookie fails now; the change happens after the back-off
        since = None if last is None else now - last
        now += change_delay(streak, since, BACKOFF)
        since = None if last is None else now - last
        streak = streak_after_change(streak, since, BACKOFF)
        last = now
        changes.append(now)
    for first in range(len(changes)):
        for end in range(first, len(changes)):
            span = changes[end] - changes[first]
            if span < BACKOFF.quiet_s:  # within one streak
                assert end - first + 1 <= max_changes(span + 1e-9, BACKOFF)


@pytest.mark.parametrize("kwargs", [dict(base_s=0), dict(base_s=-1), dict(max_s=float("inf")),
                                    dict(base_s=2.0, max_s=1.0), dict(base_s=True), dict(max_s="1")])
def test_rules_refuse_bad_times(kwargs):
    with pytest.raises(InvalidConfigurationError):
        QuarantineRule(**kwargs)
    with pytest.raises(InvalidConfigurationError):
        ChangeBackoff(**kwargs)


def test_backoff_refuses_a_quiet_time_shorter_than_its_largest_gap():
    with pytest.raises(InvalidConfigurationError, match="quiet_s"):
        ChangeBackoff(quiet_s=0.5)
