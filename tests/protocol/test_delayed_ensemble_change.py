"""Delayed ensemble change (docs/protocol.md W6) in the pure core: when a failed bookie may stay, degraded.

The oracle is behavioural: a plain tracker (no failure declared) fed acks
from every bookie that did not fail. A change may be delayed exactly when
that confirms every entry of every write set; otherwise the change must come
at once and name every failed bookie. Exhaustive for E <= 6, every Qw, Qa
and every set of failed bookies (in two orders).
"""
from __future__ import annotations

import functools
import itertools
import random

import pytest

from pyspark_ledger.protocol.add_tracker import AddTracker, ConfirmedAdd, Resend
from pyspark_ledger.protocol.delayed_change import ack_quorum_reachable, may_delay_change
from pyspark_ledger.protocol.schedule import Quorums, write_set_bookies


def ids(confirmed):
    return [c.entry_id for c in confirmed]


def all_quorums(max_ensemble: int = 6):
    for e in range(1, max_ensemble + 1):
        for qw in range(1, e + 1):
            for qa in range(1, qw + 1):
                yield e, qw, qa


def names(e: int) -> tuple[str, ...]:
    return tuple(f"b{i}" for i in range(e))


def survivors_confirm_every_write_set(e: int, qw: int, qa: int, failed) -> bool:
    """Brute force: can acks from the bookies outside ``failed`` confirm entries 0..2E-1 (every write set)?"""
    return _survivors_confirm(e, qw, qa, frozenset(failed))


@functools.lru_cache(maxsize=None)
def _survivors_confirm(e: int, qw: int, qa: int, failed: frozenset) -> bool:
    ensemble = names(e)
    tracker = AddTracker(ensemble, qw, qa)
    for _ in range(2 * e):
        tracker.add(1)
    for entry_id in range(2 * e):
        for bookie in write_set_bookies(entry_id, ensemble, qw):
            if ensemble.index(bookie) not in failed:
                tracker.ack(entry_id, bookie)
    return tracker.last_add_confirmed == 2 * e - 1


@pytest.mark.parametrize("e", range(1, 7))
def test_reachability_matches_brute_force_for_every_subset(e):
    for _, qw, qa in (q for q in all_quorums(e) if q[0] == e):
        quorums = Quorums(e, qw, qa)
        for size in range(e + 1):
            for failed in itertools.combinations(range(e), size):
                expected = survivors_confirm_every_write_set(e, qw, qa, set(failed))
                assert ack_quorum_reachable(quorums, failed) == expected, (e, qw, qa, failed)
                assert may_delay_change(quorums, failed) == (expected and size > 0)


def fail_in_order(tracker: AddTracker, ensemble, order, qw: int, qa: int):
    """Fail ``order`` one by one; check each answer against the oracle; return (request, failed so far)."""
    e, request, failed = len(ensemble), None, []
    for index in order:
        failed.append(index)
        answer = tracker.failed(ensemble[index])
        if request is not None:
            assert answer is None, "a failure during a change must join the next change"
            continue
        if survivors_confirm_every_write_set(e, qw, qa, set(failed)):
            assert answer is None, f"spurious ensemble change for failed {failed}"
            assert tracker.degraded_bookies == tuple(ensemble[i] for i in sorted(failed))
            assert not tracker.changing_ensemble
        else:
            assert answer is not None, f"failed {failed} block confirmation but no change was asked"
            assert dict(answer.failed) == {i: ensemble[i] for i in sorted(failed)}, "not every failed bookie named"
            assert answer.first_unconfirmed_entry == tracker.last_add_confirmed + 1
            assert tracker.degraded_bookies == () and tracker.changing_ensemble
            request = answer
    return request, failed


def ack_from_survivors(tracker: AddTracker, entries, failed_ids) -> list[int]:
    confirmed = []
    for entry_id in entries:
        for bookie in write_set_bookies(entry_id, tracker.ensemble, tracker.quorums.write_quorum):
            if bookie not in failed_ids:
                confirmed += ids(tracker.ack(entry_id, bookie))
    return confirmed


def run_scenario(e: int, qw: int, qa: int, order) -> str:
    ensemble = names(e)
    tracker = AddTracker(ensemble, qw, qa, delay_ensemble_change=True)
    for _ in range(2 * e):
        tracker.add(3)
    request, failed = fail_in_order(tracker, ensemble, order, qw, qa)
    failed_ids = {ensemble[i] for i in failed}
    if request is None:  # every failure delayed: new entries skip them, the others confirm everything
        plan = tracker.add(3)
        assert set(plan.targets) == set(write_set_bookies(plan.entry_id, ensemble, qw)) - failed_ids
        assert ack_from_survivors(tracker, range(2 * e + 1), failed_ids) == list(range(2 * e + 1))
        assert tracker.length == 3 * (2 * e + 1)
        return "delayed"
    assert ack_from_survivors(tracker, range(2 * e), failed_ids) == [], "confirmed during a change"
    spares = iter(f"s{i}" for i in range(e))
    current = [next(spares) if i in request.failed else bookie for i, bookie in enumerate(ensemble)]
    outcome = tracker.ensemble_changed(current)
    rest = [i for i in failed if i not in request.failed]
    assert (outcome.next_change is None) == (not rest or survivors_confirm_every_write_set(e, qw, qa, set(rest)))
    if outcome.next_change is not None:
        assert set(outcome.next_change.failed) == set(rest)
        current = [next(spares) if i in rest else bookie for i, bookie in enumerate(current)]
        outcome = tracker.ensemble_changed(current)
        rest = []  # replaced as well
    assert outcome.next_change is None and not tracker.changing_ensemble
    assert tracker.degraded_bookies == tuple(ensemble[i] for i in sorted(rest))
    ack_from_survivors(tracker, tracker.pending_entry_ids, failed_ids)
    assert tracker.pending_entry_ids == () and tracker.last_add_confirmed == 2 * e - 1
    return "changed"


@pytest.mark.parametrize("e", range(1, 7))
def test_exhaustive_failures_are_delayed_exactly_while_qa_is_reachable(e):
    outcomes = set()
    for _, qw, qa in (q for q in all_quorums(e) if q[0] == e):
        for size in range(1, e + 1):
            for failed in itertools.combinations(range(e), size):
                for order in {failed, failed[::-1]}:
                    outcomes.add(run_scenario(e, qw, qa, order))
    assert outcomes == ({"changed"} if e == 1 else {"changed", "delayed"})


@pytest.mark.parametrize("e, qw, qa", [q for q in all_quorums(5)])
def test_flag_off_every_failure_asks_for_a_change_at_once(e, qw, qa):
    ensemble = names(e)
    for index in range(e):
        tracker = AddTracker(ensemble, qw, qa)
        tracker.add(1)
        request = tracker.failed(ensemble[index])
        assert dict(request.failed) == {index: ensemble[index]} and tracker.degraded_bookies == ()


def test_W6_slow_bookie_degraded_then_second_failure_replaces_both():
    ensemble = ("b0", "b1", "b2")
    tracker = AddTracker(ensemble, 3, 2, delay_ensemble_change=True)
    for _ in range(4):
        tracker.add(10)
    tracker.ack(0, "b1")  # b1 stored entry 0 before it went silent
    assert tracker.failed("b1") is None and tracker.degraded_bookies == ("b1",)
    assert tracker.failed("b1") is None  # the same failure twice changes nothing
    assert ids(tracker.ack(0, "b0")) == [0]  # b1's ack counts: it has the entry
    for entry_id in (1, 2):
        tracker.ack(entry_id, "b0")
    assert ids(tracker.ack(1, "b2") + tracker.ack(2, "b2")) == [1, 2]  # Qa acks without b1, in order
    assert tracker.add(10).targets == ("b2", "b0")  # entry 4 skips the degraded bookie
    assert tracker.last_add_confirmed == 2 and tracker.length == 30
    tracker.ack(3, "b0")
    request = tracker.failed("b2")  # entry 3 can no longer reach Qa = 2
    assert request.failed == {1: "b1", 2: "b2"} and request.first_unconfirmed_entry == 3
    assert tracker.degraded_bookies == () and tracker.ack(4, "b0") == ()  # nothing released while changing
    outcome = tracker.ensemble_changed(("b0", "b3", "b4"))
    assert outcome.next_change is None and outcome.confirmed == ()
    assert outcome.resends == (Resend(3, ("b3", "b4")), Resend(4, ("b3", "b4")))
    assert tracker.ack(3, "b3") == (ConfirmedAdd(3, 40),)
    assert ids(tracker.ack(4, "b4")) == [4] and tracker.degraded_bookies == ()


def test_qw_equal_qa_cannot_delay():
    tracker = AddTracker(("b0", "b1", "b2", "b3"), 2, 2, delay_ensemble_change=True)
    tracker.add(1)
    assert tracker.failed("b3").failed == {3: "b3"}  # b3 is in entry 3's write set {3, 0}


def test_decision_is_on_write_sets_not_on_pending_entries():
    """E=6, Qw=3, Qa=2: b0 and b3 share no write set (delayed); b4 and b5 do."""
    ensemble = names(6)
    tracker = AddTracker(ensemble, 3, 2, delay_ensemble_change=True)
    tracker.add(1)  # entry 0 only: write set {0, 1, 2}
    assert tracker.failed("b0") is None and tracker.failed("b3") is None
    assert tracker.degraded_bookies == ("b0", "b3")
    other = AddTracker(ensemble, 3, 2, delay_ensemble_change=True)
    other.add(1), other.ack(0, "b1"), other.ack(0, "b2")  # nothing pending any more
    assert other.failed("b4") is None
    assert other.failed("b5").failed == {4: "b4", 5: "b5"}  # write sets {3, 4, 5} and {4, 5, 0} would be blocked


def test_failure_during_a_change_becomes_degraded_afterwards_when_qa_reachable():
    ensemble = names(5)
    tracker = AddTracker(ensemble, 3, 2, delay_ensemble_change=True)
    for _ in range(3):
        tracker.add(1)
    assert tracker.failed("b1") is None
    request = tracker.failed("b2")
    assert set(request.failed) == {1, 2}
    assert tracker.failed("b4") is None  # joins while the change is in progress
    outcome = tracker.ensemble_changed(("b0", "s1", "s2", "b3", "b4"))
    assert outcome.next_change is None and tracker.degraded_bookies == ("b4",)
    assert not tracker.changing_ensemble


def test_property_random_interleavings_keep_order_quorum_and_no_spurious_change():
    rng = random.Random(20240611)
    for trial in range(300):
        e = rng.randint(2, 6)
        qw = rng.randint(2, e)
        qa = rng.randint(1, qw)
        random_writer(rng, names(e), qw, qa, rng.randint(1, 14), trial)


def random_writer(rng, ensemble, qw, qa, entries, trial):
    tracker = AddTracker(ensemble, qw, qa, delay_ensemble_change=True)
    for _ in range(entries):
        tracker.add(1)
    todo = [(entry, bookie) for entry in range(entries) for bookie in write_set_bookies(entry, ensemble, qw)]
    rng.shuffle(todo)
    failures = set(rng.sample(range(len(todo)), k=min(2, len(todo))))
    acked: dict[int, set[str]] = {entry: set() for entry in range(entries)}
    confirmed: list[int] = []
    failed: set[int] = set()
    for step, (entry, bookie) in enumerate(todo):
        if step in failures:
            failed.add(ensemble.index(bookie))
            request = tracker.failed(bookie)
            reachable = survivors_confirm_every_write_set(len(ensemble), qw, qa, failed)
            assert (request is None) == reachable, (trial, failed)
            if request is not None:
                return  # the change itself is covered by the exhaustive test
            continue
        acked[entry].add(bookie)
        released = tracker.ack(entry, bookie)
        for add in released:
            members = set(write_set_bookies(add.entry_id, ensemble, qw))
            assert len(acked[add.entry_id] & members) >= qa, trial
        confirmed += ids(released)
        assert confirmed == list(range(len(confirmed))), trial


def test_replace_now_is_never_delayed_even_when_qa_is_reachable():
    """A read-only bookie will not take writes again soon: BookKeeper replaces it at once."""
    tracker = AddTracker(names(3), 3, 2, delay_ensemble_change=True)
    tracker.add(1)
    assert tracker.failed("b1") is None and tracker.degraded_bookies == ("b1",)
    request = tracker.failed("b2", replace_now=True)
    assert request.failed == {1: "b1", 2: "b2"}
    read_only_first = AddTracker(names(4), 3, 2, delay_ensemble_change=True)
    read_only_first.add(1)
    assert read_only_first.failed("b0", replace_now=True).failed == {0: "b0"}
    assert read_only_first.failed("b3", replace_now=True) is None  # joins the change in progress
    outcome = read_only_first.ensemble_changed(("s0", "b1", "b2", "b3"))
    assert outcome.next_change.failed == {3: "b3"}  # still replaced right after, not degraded
    final = read_only_first.ensemble_changed(("s0", "b1", "b2", "s3"))
    assert final.next_change is None and read_only_first.degraded_bookies == ()
