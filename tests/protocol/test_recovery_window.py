"""Recovery reading forward with a window of entries in flight: docs/protocol.md R9 (and R2, R4, R5).

Brute force over small ledgers: every way the last entries can be spread over their write sets, several
windows and delivery orders (later entries' answers first, negatives first, random), with and without an
unavailable bookie. Whatever the order, the ledger closes at an end the copies allow, never below a
confirmed entry, with exactly the entries up to the end written back, and nothing decided about an entry
past the end is used.
"""
from __future__ import annotations

import itertools
import random

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY
from pyspark_ledger.protocol.answers import ReadAnswer
from pyspark_ledger.protocol.coverage import EntryOutcome
from pyspark_ledger.protocol.ledger_rules import new_ledger_metadata
from pyspark_ledger.protocol.recovery import CloseLedger, LedgerRecovery, ReadEntry, RecoveryFailed, WriteBack
from pyspark_ledger.protocol.recovery_reads import RangeRead, coalesce, read_step
from pyspark_ledger.protocol.recovery_window import MAX_RECOVERY_READ_WINDOW, ForwardReads, check_window
from pyspark_ledger.protocol.schedule import Quorums, write_set_bookies

from tests.protocol.sim import LEDGER, SimCluster, start_recovery, store_entries

SIZE = 10  # payload bytes per entry (store_entries): entry e's length is SIZE * (e + 1)


def ledger(e, qw, qa):
    return new_ledger_metadata(LEDGER, [f"b{i}" for i in range(e)], e, qw, qa, "crc32c", "", {}, 0)


def entry_of(tag):
    return int(tag.split()[1]) if tag.startswith(("read", "add")) else -1


PICKS = {
    "fifo": lambda rng: lambda queue: 0,
    "lifo": lambda rng: lambda queue: len(queue) - 1,
    "later_entries_first": lambda rng: lambda queue: max(range(len(queue)), key=lambda i: entry_of(queue[i][0])),
    "negatives_first": lambda rng: lambda queue: next(
        (i for i, (tag, _) in enumerate(queue) if "negative" in tag), 0),
    "positives_first": lambda rng: lambda queue: next(
        (i for i, (tag, _) in enumerate(queue) if "positive" in tag), 0),
    "random": lambda rng: lambda queue: rng.randrange(len(queue)),
}


def layout_cluster(md, prefix, tail, spares=()):
    """Entries 0..prefix-1 on their whole write sets, then ``tail`` (holder sets); every header's LAC is
    ``prefix - 2``, so recovery starts at ``prefix - 1`` and reads the tail forward."""
    names = list(md.current_fragment.bookies)
    cluster = SimCluster(names + list(spares))
    holders = [set(write_set_bookies(e, names, md.write_quorum)) for e in range(prefix)] + [set(h) for h in tail]
    store_entries(cluster, holders, [prefix - 2] * len(holders), SIZE)
    return cluster, holders


def check_closed_run(driver, md, holders, start):
    """The end is one the copies allow; exactly start..end were written back, in order; nothing past it."""
    qa, threshold = md.ack_quorum, md.write_quorum - md.ack_quorum + 1
    stored = driver.closed
    assert stored is not None and stored.state == CLOSED
    end = stored.last_entry_id
    counts = [len(h) for h in holders] + [0]
    confirmed = next(e for e in range(len(counts)) if counts[e] < qa) - 1
    assert end >= confirmed  # persistence: every confirmed entry survives
    assert all(counts[e] >= 1 for e in range(start, end + 1))  # PRESENT needs a copy
    assert counts[end + 1] <= qa - 1  # ABSENT needs Qw - Qa + 1 negatives: at most Qa - 1 copies
    negatives = [t for t in driver.delivered if t.startswith(f"read {end + 1} ") and "negative" in t]
    assert len(negatives) >= threshold
    written = list(dict.fromkeys(a.entry_id for a in driver.actions if isinstance(a, WriteBack)))
    assert written == list(range(start, end + 1))  # in order; a re-send to a replacement comes later
    assert stored.length == SIZE * (end + 1)
    for entry_id in range(start, end + 1):
        holding = driver.cluster.holders(entry_id) & set(stored.ensemble_for(entry_id))
        assert len(holding) >= qa
        if not any(b.down for b in driver.cluster.bookies.values()):
            assert holding == set(write_set_bookies(entry_id, md.current_fragment.bookies, md.write_quorum))
    for entry_id in range(end + 1, len(holders)):  # never confirmed past the recovered end
        assert driver.cluster.holders(entry_id) == holders[entry_id]
    if all(c == 0 or c >= qa for c in counts[start:]):  # no entry the order could decide either way
        assert end == next(e for e in range(start, len(counts)) if counts[e] == 0) - 1
    return end


def all_tails(md, first, length):
    names = md.current_fragment.bookies
    choices = []
    for entry_id in range(first, first + length):
        members = write_set_bookies(entry_id, names, md.write_quorum)
        choices.append([set(c) for r in range(len(members) + 1) for c in itertools.combinations(members, r)])
    return itertools.product(*choices)


QUICK_PICKS = ("later_entries_first", "random")


@pytest.mark.parametrize("e, qw, qa, tail_length, windows, picks", [
    (3, 3, 2, 3, (1, 4), QUICK_PICKS),     # every spread of 3 entries over Qw = 3 bookies
    (3, 3, 2, 2, (2, 3), tuple(PICKS)),    # fewer entries, every order
    (3, 2, 1, 3, (1, 2, 5), tuple(PICKS)),
    (4, 3, 2, 2, (1, 3), tuple(PICKS)),    # E > Qw: write sets differ per entry
])
def test_R9_every_spread_of_the_last_entries_any_window_any_order(e, qw, qa, tail_length, windows, picks):
    md = ledger(e, qw, qa)
    prefix = 2
    rng = random.Random(f"{e}{qw}{qa}")
    runs = 0
    for tail in all_tails(md, prefix, tail_length):
        for window in windows:
            for name in picks:
                make_pick = PICKS[name]
                cluster, holders = layout_cluster(md, prefix, tail)
                driver = start_recovery(cluster, md, window=window, pick=make_pick(rng))
                driver.run()
                assert isinstance(driver.outcome, CloseLedger), (tail, window, name, driver.outcome)
                check_closed_run(driver, md, holders, prefix - 1)
                runs += 1
    assert runs == (2 ** qw) ** tail_length * len(windows) * len(picks)


@pytest.mark.parametrize("window", [1, 4])
def test_R9_R5_unavailable_and_lost_answers_close_safely_or_fail_without_closing(window):
    md = ledger(3, 3, 2)
    rng = random.Random(9)
    closed = failed = 0
    spares = ("s0", "s1", "s2")
    for trial, tail in enumerate(all_tails(md, 2, 3)):
        for down in ("b0", "b2"):
            cluster, holders = layout_cluster(md, 2, tail, spares)
            cluster[down].down = True  # and 1 in 5 answers of the others lost (unknown)
            driver = start_recovery(cluster, md, window=window, pick=PICKS["random"](rng), spares=spares,
                                    flaky=0.2, seed=trial)
            driver.run()
            if isinstance(driver.outcome, RecoveryFailed):
                failed += 1
                assert driver.meta.read()[0].state == IN_RECOVERY
                written = list(dict.fromkeys(a.entry_id for a in driver.actions if isinstance(a, WriteBack)))
                if "write-back" in driver.outcome.reason:  # R6: the spares ran out
                    continue
                assert "explicit 'no such entry'" in driver.outcome.reason
                undecided = int(driver.outcome.reason.split()[1])
                assert written == list(range(1, 1 + len(written)))
                assert all(entry_id < undecided for entry_id in written)  # nothing at or past the undecided entry
                continue
            closed += 1
            check_closed_run(driver, md, holders, 1)
    assert closed > 100 and failed > 50


def test_R9_a_copy_past_the_end_decided_first_is_never_written_back():
    md = ledger(3, 3, 2)
    tail = [set(), {"b1"}, {"b0", "b1", "b2"}]  # 6 never written; 7 and 8 are the old writer's later adds
    cluster, holders = layout_cluster(md, 6, tail)
    driver = start_recovery(cluster, md, window=8, pick=PICKS["later_entries_first"](None))
    driver.run()
    assert driver.delivered.index(next(t for t in driver.delivered if t.startswith("read 8 "))) < \
        driver.delivered.index(next(t for t in driver.delivered if t.startswith("read 6 ")))
    assert check_closed_run(driver, md, holders, 5) == 5
    assert cluster.holders(7) == {"b1"} and cluster.holders(8) == {"b0", "b1", "b2"}


def test_R9_an_unknown_past_the_end_does_not_stop_the_close():
    md = ledger(3, 3, 2)
    cluster, holders = layout_cluster(md, 6, [set()] * 3)
    for bookie in cluster.bookies.values():
        original = bookie.read
        bookie.read = lambda e, fence, original=original: ReadAnswer.unknown("IO_ERROR") if e == 7 else original(e, fence)
    driver = start_recovery(cluster, md, window=4, pick=PICKS["later_entries_first"](None))
    driver.run()
    assert check_closed_run(driver, md, holders, 5) == 5
    assert any(t.startswith("read 7 ") and "unknown" in t for t in driver.delivered)


def test_R9_R5_an_unknown_below_present_entries_fails_and_writes_nothing_after_it():
    md = ledger(3, 3, 2)
    cluster, holders = layout_cluster(md, 6, [{"b0", "b1", "b2"}] * 4)  # starts at 5; 6..9 on every bookie
    for bookie in cluster.bookies.values():
        original = bookie.read
        bookie.read = lambda e, fence, original=original: ReadAnswer.unknown("timeout") if e == 6 else original(e, fence)
    driver = start_recovery(cluster, md, window=8, pick=PICKS["later_entries_first"](None))
    driver.run()
    assert isinstance(driver.outcome, RecoveryFailed)
    assert "entry 6 of ledger" in driver.outcome.reason and "explicit 'no such entry'" in driver.outcome.reason
    assert any(t.startswith("read 8 ") and "positive" in t for t in driver.delivered)  # decided before 6
    assert all(a.entry_id < 6 for a in driver.actions if isinstance(a, WriteBack))
    assert driver.meta.read()[0].state == IN_RECOVERY


def test_R9_reads_go_on_while_write_backs_are_unanswered():
    md = ledger(3, 3, 2)
    for window in (1, 4):
        cluster, holders = layout_cluster(md, 2, [{"b0", "b1", "b2"}] * 12)
        seen = {}

        def reads_before_acks(queue, seen=seen):
            index = next((i for i, (tag, _) in enumerate(queue) if not tag.startswith("add")), 0)
            if queue[index][0].startswith("add") and "end" not in seen:
                seen["end"] = driver.recovery.last_entry_id
            return index

        driver = start_recovery(cluster, md, window=window, pick=reads_before_acks)
        driver.run()
        assert seen["end"] == 13  # every read was answered while no write-back had been acknowledged
        check_closed_run(driver, md, holders, 1)


def test_R9_the_window_bounds_the_entries_in_flight_and_refills_in_halves():
    quorums = Quorums(3, 3, 2)
    reads = ForwardReads(("b0", "b1", "b2"), quorums, 10, 4)
    first = reads.ask()
    assert [r.entry_id for r in first] == [10, 11, 12, 13] and all(r.fence for r in first)
    assert first[0].targets == ("b1", "b2", "b0")
    assert reads.ask() == ()
    present = ReadAnswer.present(b"x" * 40, 5)
    assert reads.record(11, "b0", present) is False  # decided, but 10 is not: nothing to take
    assert reads.record(10, "b2", present) is True
    assert [(e, o) for e, o, _, _ in reads.take()] == [(10, EntryOutcome.PRESENT), (11, EntryOutcome.PRESENT)]
    assert [r.entry_id for r in reads.ask()] == [14, 15]  # half the window free: filled again
    assert reads.awaiting(12) and not reads.awaiting(10)
    with pytest.raises(InvalidArgumentError, match="does not store entry 12"):
        reads.record(12, "b9", present)
    reads.stop()
    assert not reads.awaiting(12) and reads.record(12, "b0", present) is False


def test_R9_window_limits_name_the_limit():
    assert check_window(1) == 1 and check_window(MAX_RECOVERY_READ_WINDOW) == MAX_RECOVERY_READ_WINDOW
    for bad in (0, MAX_RECOVERY_READ_WINDOW + 1, 2.0, True, "8"):
        with pytest.raises(InvalidArgumentError, match=f"from 1 to {MAX_RECOVERY_READ_WINDOW}"):
            check_window(bad)
    with pytest.raises(InvalidArgumentError, match="window"):
        LedgerRecovery(ledger(3, 3, 2).with_changes(state=IN_RECOVERY), 0)


def test_R9_the_anchor_and_the_first_window_are_asked_for_together():
    md = ledger(3, 3, 2)
    cluster, _ = layout_cluster(md, 6, [])
    driver = start_recovery(cluster, md, window=3)
    driver._handle(driver.recovery.start())
    for tag, deliver in list(driver.queue):
        driver._handle(deliver())
    reads = [(a.entry_id, a.fence) for a in driver.actions if isinstance(a, ReadEntry)]
    assert reads == [(4, False), (5, True), (6, True), (7, True)]


def window_reads(e, qw, first, count, fence=True):
    reads = ForwardReads(tuple(f"b{i}" for i in range(e)), Quorums(e, qw, 1), first, count)
    return reads.ask(fence)


@pytest.mark.parametrize("e, qw", [(3, 3), (3, 2), (4, 3), (5, 3), (5, 1)])
def test_R9_range_reads_cover_every_entry_and_bookie_asked_exactly_once(e, qw):
    reads = window_reads(e, qw, 7, 23) + (ReadEntry(6, tuple(f"b{i}" for i in range(qw)), False),)
    step = read_step(e, qw)
    runs = coalesce(reads, step, max_entries=4)
    asked = sorted((read.entry_id, bookie, read.fence) for read in reads for bookie in read.targets)
    covered = sorted((entry_id, run.bookie_id, run.fence) for run in runs for entry_id in run.entry_ids)
    assert covered == asked
    assert all(run.step == step and len(run.entry_ids) <= 4 for run in runs)
    assert [run.first_entry_id for run in runs] == sorted(run.first_entry_id for run in runs)


def test_R9_range_reads_of_a_full_ensemble_are_contiguous_and_the_rest_is_what_is_left():
    runs = coalesce(window_reads(3, 3, 10, 6), 1, max_entries=512)
    assert runs == [RangeRead(b, 10, 15, 1, True) for b in ("b1", "b2", "b0")]
    run = runs[0]
    assert run.rest_after(2) == RangeRead("b1", 12, 15, 1, True) and run.rest_after(6) is None
    striped = coalesce(window_reads(5, 3, 0, 10), 5, max_entries=512)
    assert RangeRead("b0", 0, 5, 5, True) in striped and RangeRead("b2", 2, 7, 5, True) in striped
    assert striped[0].rest_after(1) == RangeRead("b0", 5, 5, 5, True)
    with pytest.raises(InvalidArgumentError, match="at least one entry"):
        run.rest_after(0)
    with pytest.raises(InvalidArgumentError, match=">= 1"):
        coalesce([], 0, 1)
