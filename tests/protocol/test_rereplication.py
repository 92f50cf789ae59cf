"""The pure re-replication rules: which slots to repair, which entries, from where, and the new metadata."""
from __future__ import annotations

import itertools

import pytest

from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY, OPEN, Fragment, LedgerMetadata
from pyspark_ledger.protocol.rereplication import (AbsenceClock, FragmentRepair, Lasting, apply_repairs, entries_of,
                                                   fragment_bounds, lost_bookies, open_on_lost, plan_repairs,
                                                   should_scan, sources_of)
from pyspark_ledger.protocol.schedule import write_set


def ledger(fragments, state=CLOSED, last=29, e=3, qw=2, qa=2) -> LedgerMetadata:
    return LedgerMetadata(7, e, qw, qa, tuple(Fragment(first, tuple(b)) for first, b in fragments), state=state,
                          last_entry_id=last if state == CLOSED else -1)


def test_lost_bookies_are_the_named_ones_not_available():
    md = ledger([(0, "abc"), (10, "abd")])
    assert lost_bookies(md, ["a", "b", "c", "d"]) == set()
    assert lost_bookies(md, ["a", "b"]) == {"c", "d"}


def test_fragment_bounds_sealed_and_open():
    closed = ledger([(0, "abc"), (10, "abd")], last=29)
    assert fragment_bounds(closed, 0) == (0, 9)
    assert fragment_bounds(closed, 1) == (10, 29)
    for state in (OPEN, IN_RECOVERY):
        md = ledger([(0, "abc"), (10, "abd")], state=state)
        assert fragment_bounds(md, 0) == (0, 9)
        assert fragment_bounds(md, 1) is None, "an unsealed last fragment belongs to its writer"
    empty_tail = ledger([(0, "abc"), (10, "abd")], last=9)
    assert fragment_bounds(empty_tail, 1) == (10, 9)


def test_plan_repairs_every_sealed_slot_of_a_lost_bookie_in_order():
    md = ledger([(0, "abc"), (10, "abd"), (20, "ecd")], last=29)
    plan = plan_repairs(md, {"c", "x"})
    assert [(r.first_entry_id, r.last_entry_id, r.bookie_index, r.lost_bookie) for r in plan.repairs] == [
        (0, 9, 2, "c"), (20, 29, 1, "c")]
    assert plan.repairs[1].ensemble == ("e", "c", "d")
    assert plan.skipped_open_fragments == ()
    assert plan_repairs(md, set()).repairs == ()


def test_plan_repairs_leaves_the_open_ledgers_last_fragment_to_its_writer():
    md = ledger([(0, "abc"), (10, "abd")], state=OPEN)
    plan = plan_repairs(md, {"a"})
    assert [(r.first_entry_id, r.bookie_index) for r in plan.repairs] == [(0, 0)]
    assert plan.skipped_open_fragments == (10,)


@pytest.mark.parametrize("e", range(1, 6))
def test_entries_of_is_exactly_the_entries_whose_write_set_has_the_slot(e):
    for qw in range(1, e + 1):
        for slot, first, count in itertools.product(range(e), (0, 3, 7), (0, 1, 11)):
            repair = FragmentRepair(first, first + count - 1, slot, "lost", tuple(f"b{i}" for i in range(e)))
            expected = [x for x in range(first, first + count) if slot in write_set(x, e, qw)]
            assert list(entries_of(repair, e, qw)) == expected


def test_sources_are_the_surviving_write_set_in_order():
    repair = FragmentRepair(0, 9, 1, "b", ("a", "b", "c", "d"))
    assert sources_of(repair, 0, 3, {"b"}) == ["a", "c"]
    assert sources_of(repair, 1, 3, {"b"}) == ["c", "d"]
    assert sources_of(repair, 0, 3, {"b", "a", "c"}) == []


def test_apply_repairs_swaps_the_slots():
    md = ledger([(0, "abc"), (10, "abd")], last=29)
    plan = plan_repairs(md, {"b"})
    updated = apply_repairs(md, {plan.repairs[0]: "x", plan.repairs[1]: "y"})
    assert [f.bookies for f in updated.fragments] == [("a", "x", "c"), ("a", "y", "d")]
    assert (updated.state, updated.last_entry_id) == (md.state, md.last_entry_id)
    assert apply_repairs(updated, {plan.repairs[0]: "x", plan.repairs[1]: "y"}) == updated, "retry is idempotent"


def test_apply_repairs_refuses_when_the_metadata_moved_on():
    md = ledger([(0, "abc"), (10, "abd")], last=29)
    repair = plan_repairs(md, {"b"}).repairs[0]
    replaced_by_other = ledger([(0, "azc"), (10, "abd")], last=29)
    assert apply_repairs(replaced_by_other, {repair: "x"}) is None
    assert apply_repairs(md, {repair: "c"}) is None, "a replacement already in the ensemble"
    gone = ledger([(0, "abd")], last=29)
    assert apply_repairs(gone, {FragmentRepair(10, 29, 1, "b", tuple("abd")): "x"}) is None


def test_apply_repairs_on_an_open_ledger_that_was_closed_meanwhile():
    open_md = ledger([(0, "abc"), (10, "abd")], state=OPEN)
    repair = plan_repairs(open_md, {"c"}).repairs[0]
    closed = ledger([(0, "abc"), (10, "abd")], last=40)
    assert apply_repairs(closed, {repair: "x"}).fragments[0].bookies == ("a", "b", "x")


def test_absence_clock_counts_a_bookie_lost_only_after_the_delay_without_a_return():
    clock = AbsenceClock(delay_s=60)
    assert clock.observe({"a", "b", "c"}, {"a", "b", "c"}, now=0) == set()
    assert clock.observe({"a", "b", "c"}, {"a", "b"}, now=10) == set()
    assert clock.observe({"a", "b", "c"}, {"a", "b"}, now=69) == set()
    assert clock.observe({"a", "b", "c"}, {"a", "b"}, now=70) == {"c"}
    assert clock.observe({"a", "b", "c"}, {"a", "b", "c"}, now=71) == set(), "back: not lost"
    assert clock.observe({"a", "b", "c"}, {"a", "b"}, now=80) == set(), "a new absence starts the delay again"
    assert clock.observe({"a", "b"}, {"a", "b"}, now=200) == set(), "no ledger names it any more"
    assert clock.absent_since == {}
    assert AbsenceClock(delay_s=0).observe({"x"}, set(), now=5) == {"x"}


def test_lasting_reports_keys_present_in_every_observation_for_the_delay():
    lasting = Lasting(delay_s=30)
    assert lasting.observe({1, 2}, now=0) == set()
    assert lasting.observe({1, 2}, now=29) == set()
    assert lasting.observe({1}, now=30) == {1}, "2 missed an observation"
    assert lasting.observe({1, 2}, now=40) == {1}, "2 starts again at 40"
    assert lasting.observe({1, 2}, now=70) == {1, 2}
    assert lasting.observe(set(), now=71) == set() and lasting.since == {}
    assert Lasting(delay_s=0).observe({"x"}, now=5) == {"x"}


@pytest.mark.parametrize("state, fragments, lost, expected", [
    (OPEN, [(0, "abc")], {"c"}, True),
    (IN_RECOVERY, [(0, "abc")], {"a"}, True),
    (OPEN, [(0, "abc"), (10, "abd")], {"c"}, False),   # only a sealed fragment names it: repaired as is
    (OPEN, [(0, "abc")], {"x"}, False),
    (OPEN, [(0, "abc")], set(), False),
])
def test_open_on_lost_is_an_unclosed_ledger_whose_last_fragment_names_a_lost_bookie(state, fragments, lost,
                                                                                     expected):
    assert open_on_lost(ledger(fragments, state=state), lost) is expected
    assert open_on_lost(ledger(fragments, last=40), lost) is False, "a closed ledger is repaired as is"


def test_should_scan_only_when_something_can_need_repair():
    bookies = ["a", "b", "c"]
    for subset_bits in range(8):
        registered = {bookie for index, bookie in enumerate(bookies) if subset_bits >> index & 1}
        for previous_bits in range(8):
            previous = frozenset(bookie for index, bookie in enumerate(bookies) if previous_bits >> index & 1)
            for pending in (False, True):
                for rounds in (0, 5, 9):
                    expected = pending or bool(previous - registered) or rounds + 1 >= 10
                    assert should_scan(previous, registered, pending, rounds, every=10) is expected
            assert should_scan(None, registered, False, 0, every=10), "the first round always scans"
    assert not should_scan(frozenset("ab"), {"a", "b", "d"}, False, 0, every=10), "a new bookie needs no scan"
