"""The writer's pending adds (docs/protocol.md W1-W5, C2), and randomized ack orders."""
from __future__ import annotations

import random

import pytest

from pyspark_ledger.errors import InvalidArgumentError, InvalidStateError, LedgerClosedError, NotEnoughBookiesError
from pyspark_ledger.metadata.model import IN_RECOVERY
from pyspark_ledger.protocol.add_tracker import AddTracker, ConfirmedAdd, Resend
from pyspark_ledger.protocol.ledger_rules import (
    Decision, check_transition, ensemble_change, new_ledger_metadata, resolve_ensemble_change_conflict,
)
from pyspark_ledger.protocol.placement import replace_bookie
from pyspark_ledger.protocol.schedule import write_set_bookies

ENSEMBLE = ("b0", "b1", "b2")
ALL_BOOKIES = ("b0", "b1", "b2", "b3")


def ids(confirmed):
    return [c.entry_id for c in confirmed]


def test_W1_out_of_order_acks_confirm_in_order():
    tracker = AddTracker(("b0", "b1", "b2", "b3"), 3, 2)
    plans = [tracker.add(10) for _ in range(4)]
    assert [p.entry_id for p in plans] == [0, 1, 2, 3]
    assert plans[2].targets == ("b2", "b3", "b0") and plans[3].length == 40
    assert ids(tracker.ack(3, "b3") + tracker.ack(3, "b0")) == []  # 3 is confirmable, 0..2 are not
    assert ids(tracker.ack(1, "b1") + tracker.ack(1, "b2")) == []
    assert ids(tracker.ack(0, "b0")) == [] and tracker.last_add_confirmed == -1
    assert tracker.ack(0, "b2") == (ConfirmedAdd(0, 10), ConfirmedAdd(1, 20))
    assert tracker.last_add_confirmed == 1 and tracker.length == 20
    assert ids(tracker.ack(2, "b2")) == [] and ids(tracker.ack(2, "b0")) == [2, 3]
    assert tracker.last_add_confirmed == 3 and tracker.length == 40
    assert tracker.add(5).last_add_confirmed == 3  # the LAC travels in the next entry's header


def test_acks_outside_the_write_set_duplicates_and_late_acks_do_not_count():
    tracker = AddTracker(("b0", "b1", "b2", "b3"), 2, 2)
    tracker.add(1)  # write set b0, b1
    assert tracker.ack(0, "b2") == () and tracker.ack(0, "zz") == ()
    assert tracker.ack(0, "b0") == () and tracker.ack(0, "b0") == ()
    assert ids(tracker.ack(0, "b1")) == [0]
    assert tracker.ack(0, "b1") == () and tracker.ack(7, "b1") == ()


def test_W2_one_failure_one_ensemble_change_resends_and_no_confirmation_meanwhile():
    md = new_ledger_metadata(1, ENSEMBLE, 3, 3, 2, "crc32c", "", {}, 0)
    tracker = AddTracker(ENSEMBLE, 3, 2)
    for _ in range(6):
        tracker.add(100)
    for entry_id in (0, 1, 2):
        tracker.ack(entry_id, "b0")
        tracker.ack(entry_id, "b2")
    assert tracker.last_add_confirmed == 2
    for entry_id in (3, 4, 5):
        tracker.ack(entry_id, "b0")
    tracker.ack(5, "b1")  # b1 acked 5 before its failure on 3 was noticed
    request = tracker.failed("b1")
    assert request.failed == {1: "b1"} and request.first_unconfirmed_entry == 3
    assert tracker.failed("b1") is None  # the same failure twice asks for one change
    assert tracker.ack(3, "b2") == () and tracker.ack(4, "b2") == ()  # W2: held while changing
    assert tracker.add(100).targets == ("b0", "b2")  # entry 6 skips the failed bookie for now
    replacement = replace_bookie(request.ensemble, 1, ALL_BOOKIES, {"b1"}, random.Random(0))
    assert replacement == "b3"
    new_md = ensemble_change(md, {1: replacement}, request.first_unconfirmed_entry)
    check_transition(md, new_md)
    assert [f.first_entry_id for f in new_md.fragments] == [0, 3]
    outcome = tracker.ensemble_changed(new_md.current_fragment.bookies)
    assert outcome.resends == tuple(Resend(e, ("b3",)) for e in (3, 4, 5, 6))
    assert ids(outcome.confirmed) == [3, 4] and outcome.next_change is None
    assert tracker.ack(5, "b1") == ()  # the replaced bookie no longer counts
    assert ids(tracker.ack(5, "b3")) == [5]  # its earlier ack for 5 was discarded: needs b3 now


def test_W3_second_failure_during_the_change_replaces_both():
    md = new_ledger_metadata(1, ENSEMBLE, 3, 3, 2, "crc32c", "", {}, 0)
    tracker = AddTracker(ENSEMBLE, 3, 2)
    for _ in range(3):
        tracker.add(10)
    tracker.ack(0, "b0"), tracker.ack(0, "b1")
    first = tracker.failed("b1")
    assert tracker.failed("b2") is None  # joins the next change
    md = ensemble_change(md, {1: "b3"}, first.first_unconfirmed_entry)
    outcome = tracker.ensemble_changed(md.current_fragment.bookies)
    assert outcome.confirmed == () and outcome.next_change.failed == {2: "b2"}
    assert outcome.next_change.first_unconfirmed_entry == 1 and tracker.changing_ensemble
    tracker.ack(1, "b0"), tracker.ack(1, "b3")
    md2 = ensemble_change(md, {2: "b4"}, outcome.next_change.first_unconfirmed_entry)
    check_transition(md, md2)
    assert [f.first_entry_id for f in md2.fragments] == [0, 1]  # replaced in place: valid
    final = tracker.ensemble_changed(md2.current_fragment.bookies)
    assert ids(final.confirmed) == [1] and final.next_change is None
    assert {r.entry_id: r.targets for r in final.resends} == {1: ("b4",), 2: ("b4",)}


def test_W3_second_failure_without_a_spare_fails_the_writer_cleanly():
    tracker = AddTracker(ENSEMBLE, 3, 2)
    for _ in range(3):
        tracker.add(10)
    tracker.ack(0, "b0"), tracker.ack(0, "b2")
    tracker.failed("b1")
    tracker.failed("b2")
    with pytest.raises(NotEnoughBookiesError):
        replace_bookie(ENSEMBLE, 2, ("b0", "b1", "b2", "b3"), {"b1", "b3"}, random.Random(0))
    assert tracker.stop("not enough bookies") == (1, 2)
    assert tracker.last_add_confirmed == 0 and tracker.length == 10


def test_W4_no_spare_bookie_fails_adds_and_keeps_the_confirmed_prefix():
    tracker = AddTracker(ENSEMBLE, 3, 2)
    for _ in range(4):
        tracker.add(7)
    for entry_id in (0, 1):
        tracker.ack(entry_id, "b0"), tracker.ack(entry_id, "b1")
    request = tracker.failed("b2")
    with pytest.raises(NotEnoughBookiesError, match="only 0 eligible"):
        replace_bookie(request.ensemble, 2, ENSEMBLE, {"b2"}, random.Random(0))
    assert tracker.stop("not enough bookies to replace b2") == (2, 3)
    assert (tracker.last_add_confirmed, tracker.length) == (1, 14)
    with pytest.raises(LedgerClosedError, match="not enough bookies"):
        tracker.add(7)


def test_W5_metadata_moved_to_recovery_during_the_change_stops_the_writer():
    md = new_ledger_metadata(1, ENSEMBLE, 3, 3, 2, "crc32c", "", {}, 0)
    tracker = AddTracker(ENSEMBLE, 3, 2)
    for _ in range(2):
        tracker.add(7)
    request = tracker.failed("b1")
    stored = md.with_changes(state=IN_RECOVERY)  # a recovering reader won the CAS
    resolution = resolve_ensemble_change_conflict(stored, request.failed, {1: "b3"},
                                                  request.first_unconfirmed_entry)
    assert resolution.decision is Decision.ERROR
    assert tracker.stop(resolution.reason) == (0, 1)
    assert tracker.ack(0, "b0") == () and tracker.last_add_confirmed == -1
    assert stored.fragments == md.fragments  # nothing overwritten


def test_C2_add_after_stop_fails_and_stop_is_idempotent():
    tracker = AddTracker(ENSEMBLE, 3, 2)
    tracker.add(1)
    assert tracker.stop("closed") == (0,)
    assert tracker.stop("closed") == ()
    with pytest.raises(LedgerClosedError, match="closed"):
        tracker.add(1)


def test_bad_arguments_are_refused():
    with pytest.raises(InvalidArgumentError, match="distinct"):
        AddTracker(("b0", "b0", "b1"), 3, 2)
    tracker = AddTracker(ENSEMBLE, 3, 2)
    with pytest.raises(InvalidArgumentError, match="payload size"):
        tracker.add(-1)
    with pytest.raises(InvalidStateError, match="no ensemble change in progress"):
        tracker.ensemble_changed(("b0", "b1", "b3"))
    with pytest.raises(InvalidArgumentError, match="continue at entry 0"):
        tracker.add_recovered(3, 10)


def run_random_writer(rng, ensemble, qw, qa, entries, spares):
    """Random ack order, one random failure; checks W1/W2 invariants at every step."""
    tracker = AddTracker(ensemble, qw, qa)
    lengths = {}
    for _ in range(entries):
        plan = tracker.add(rng.randrange(50))
        lengths[plan.entry_id] = plan.length
    acks = {e: set() for e in range(entries)}  # the model: acks that still count
    todo = [(e, b) for e in range(entries) for b in write_set_bookies(e, ensemble, qw)]
    rng.shuffle(todo)
    fail_at, confirmed, current, changes = rng.randrange(len(todo)), [], tuple(ensemble), []

    def check(released):
        assert not tracker.changing_ensemble or not released
        for c in released:
            members = set(write_set_bookies(c.entry_id, current, qw))
            assert len(acks[c.entry_id] & members) >= qa
            assert c.length == lengths[c.entry_id]
        confirmed.extend(ids(released))
        assert confirmed == list(range(len(confirmed)))

    for step, (entry_id, bookie) in enumerate(todo):
        if step == fail_at and bookie in current and spares:
            request = tracker.failed(bookie)
            assert request.first_unconfirmed_entry == tracker.last_add_confirmed + 1
            for e in range(request.first_unconfirmed_entry, entries):
                acks[e].discard(bookie)
            new = list(current)
            new[current.index(bookie)] = spares[0]
            current = tuple(new)
            outcome = tracker.ensemble_changed(new)
            changes.append(request.first_unconfirmed_entry)
            check(outcome.confirmed)
            todo.extend((r.entry_id, t) for r in outcome.resends for t in r.targets)
            continue
        if bookie in current:
            acks[entry_id].add(bookie)
        check(tracker.ack(entry_id, bookie))
    return tracker, confirmed, changes


def test_property_random_ack_orders_never_confirm_out_of_order_or_short_of_qa():
    rng = random.Random(987654321)
    changed = 0
    for trial in range(300):
        e = rng.randint(1, 5)
        qw = rng.randint(1, e)
        qa = rng.randint(1, qw)
        ensemble = tuple(f"b{i}" for i in range(e))
        entries = rng.randint(1, 12)
        tracker, confirmed, changes = run_random_writer(rng, ensemble, qw, qa, entries, ("spare",))
        assert confirmed == list(range(entries)), trial  # resends to the spare complete every add
        assert tracker.pending_entry_ids == () and not tracker.changing_ensemble, trial
        changed += len(changes)
    assert changed == 300  # every trial went through exactly one ensemble change


@pytest.mark.parametrize("seed", range(40))
def test_acks_of_one_answer_batch_confirm_what_the_same_acks_one_by_one_do(seed):
    """ack_many (the writer's path: one answer batch of a bookie) against ack, one at a time."""
    rng = random.Random(seed)
    ensemble = ALL_BOOKIES[:rng.choice((3, 4))]
    write_quorum = rng.randint(2, len(ensemble))
    ack_quorum = rng.randint(1, write_quorum)
    batched, single = AddTracker(ensemble, write_quorum, ack_quorum), AddTracker(ensemble, write_quorum, ack_quorum)
    for _ in range(12):
        batched.add(7)
        single.add(7)
    # acks of unknown entries and of bookies outside the write set or the ensemble, and duplicates
    remaining = [(entry_id, bookie) for entry_id in range(14) for bookie in ALL_BOOKIES + ("stranger",)]
    remaining += rng.sample(remaining, 10)
    rng.shuffle(remaining)
    while remaining:
        bookie = rng.choice(sorted({b for _, b in remaining}))
        batch = [entry_id for entry_id, b in remaining if b == bookie][:rng.randint(1, 8)]
        for entry_id in batch:
            remaining.remove((entry_id, bookie))
        expected = tuple(confirmed for entry_id in batch for confirmed in single.ack(entry_id, bookie))
        assert batched.ack_many(batch, bookie) == expected
        assert (batched.last_add_confirmed, batched.length) == (single.last_add_confirmed, single.length)
    assert batched.pending_entry_ids == single.pending_entry_ids == ()


@pytest.mark.parametrize("seed", range(40))
def test_a_turn_of_adds_and_acks_as_ranges_match_one_add_and_one_ack_at_a_time(seed):
    """add_many and ack_range (the writer's hot path) against add and ack_many: the same ids, targets
    (also with a degraded bookie), lengths, confirmations in order (W1) and none during a change (W2)."""
    rng = random.Random(seed)
    ensemble = ALL_BOOKIES[:rng.choice((3, 4))]
    write_quorum = rng.randint(2, len(ensemble))
    ack_quorum = rng.randint(1, write_quorum)
    delay = rng.random() < 0.5
    fast = AddTracker(ensemble, write_quorum, ack_quorum, delay_ensemble_change=delay)
    slow = AddTracker(ensemble, write_quorum, ack_quorum, delay_ensemble_change=delay)
    for turn in range(6):
        if turn == 3:  # a bookie fails: degraded (targets skip it) or an ensemble change (no confirmations)
            failed = rng.choice(ensemble)
            assert fast.failed(failed) == slow.failed(failed)
        sizes = [rng.randint(0, 50) for _ in range(rng.randint(1, 9))]
        first, targets = fast.add_many(sizes)
        plans = [slow.add(size) for size in sizes]
        assert first == plans[0].entry_id and targets == [plan.targets for plan in plans]
        acks = [(entry_id, bookie) for entry_id in range(first, first + len(sizes)) for bookie in ALL_BOOKIES]
        rng.shuffle(acks)
        while acks:
            bookie = acks[0][1]
            batch = [entry_id for entry_id, b in acks if b == bookie][:rng.randint(1, 5)]
            acks = [(e, b) for e, b in acks if b != bookie or e not in batch]
            assert list(fast.ack_range(batch, bookie)) == ids(slow.ack_many(batch, bookie))
            assert (fast.last_add_confirmed, fast.length) == (slow.last_add_confirmed, slow.length)
    assert fast.pending_entry_ids == slow.pending_entry_ids
    with pytest.raises(InvalidArgumentError):
        fast.add_many([3, -1])
    assert fast.pending_entry_ids == slow.pending_entry_ids  # nothing added by a refused turn
    fast.stop("closed")
    with pytest.raises(LedgerClosedError):
        fast.add_many([1])


@pytest.mark.parametrize("seed", range(40))
def test_acks_given_as_runs_of_ids_match_acks_given_one_by_one(seed):
    """ack_range with a ``range`` (docs/protocol.md W9 runs: marked without a look-up per id when the bookie is
    in every write set) against the same ids as a list: runs reaching below the LAC and past the last entry
    added, acks of degraded and of replaced bookies, E = Qw and E > Qw alike."""
    rng = random.Random(seed)
    ensemble = ALL_BOOKIES[:rng.choice((3, 4))]
    write_quorum = rng.randint(2, len(ensemble))
    ack_quorum = rng.randint(1, write_quorum)
    delay = rng.random() < 0.5
    fast = AddTracker(ensemble, write_quorum, ack_quorum, delay_ensemble_change=delay)
    slow = AddTracker(ensemble, write_quorum, ack_quorum, delay_ensemble_change=delay)
    for turn in range(8):
        if turn == 4:
            failed = rng.choice(ensemble)
            assert fast.failed(failed) == slow.failed(failed)
        sizes = [rng.randint(0, 50) for _ in range(rng.randint(1, 12))]
        assert fast.add_many(sizes) == slow.add_many(sizes)
        for _ in range(rng.randint(1, 12)):
            bookie = rng.choice(ALL_BOOKIES)
            start = rng.randint(fast.last_add_confirmed - 3, fast.next_entry_id + 2)
            run = range(start, start + rng.randint(0, 8))
            assert fast.ack_range(run, bookie) == slow.ack_range(list(run), bookie)
            assert (fast.last_add_confirmed, fast.length) == (slow.last_add_confirmed, slow.length)
            assert fast._pending == slow._pending  # the same acks marked on every unconfirmed entry
