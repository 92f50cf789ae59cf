"""The recovery state machine against simulated bookies: docs/protocol.md F1, F3, R1-R8."""
from __future__ import annotations

import random

import pytest

from pyspark_ledger.errors import LedgerClosedError, RecoveryError
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY, Fragment
from pyspark_ledger.protocol.answers import LacAnswer, ReadAnswer
from pyspark_ledger.protocol.ledger_rules import (
    Decision, check_transition, close_metadata, mark_in_recovery, new_ledger_metadata, resolve_close_conflict,
)
from pyspark_ledger.protocol.recovery import (
    ChooseReplacements, CloseLedger, FenceAndReadLac, LedgerRecovery, ReadEntry, RecoveryFailed, RecoveryPhase,
    WriteBack,
)
from pyspark_ledger.protocol.schedule import write_set_bookies

from tests.protocol.sim import LEDGER, SimCluster, SimMetadata, SimWriter, start_recovery, store_entries

B3 = ["b0", "b1", "b2"]


def ledger(e, qw, qa, names=B3):
    return new_ledger_metadata(LEDGER, names[:e], e, qw, qa, "crc32c", "", {}, 0)


def full_copies(md, count):
    return [set(write_set_bookies(e, md.current_fragment.bookies, md.write_quorum)) for e in range(count)]


def negatives_first(queue):
    return next((i for i, (tag, _) in enumerate(queue) if "negative" in tag), 0)


def assert_closed(driver, last_entry_id, length):
    assert isinstance(driver.outcome, CloseLedger), driver.outcome
    stored, _ = driver.meta.read()
    assert (stored.state, stored.last_entry_id, stored.length) == (CLOSED, last_entry_id, length)
    return stored


def assert_not_closed(driver, *words):
    assert isinstance(driver.outcome, RecoveryFailed)
    assert not any(isinstance(a, CloseLedger) for a in driver.actions)
    assert driver.meta.read()[0].state == IN_RECOVERY
    for word in words:
        assert word in driver.outcome.reason
    with pytest.raises(RecoveryError, match="left unclosed"):
        raise driver.outcome.error()


def test_F1_example_entry_12_recovered_and_the_old_writer_fenced():
    md = ledger(3, 2, 2)
    cluster = SimCluster(B3)
    writer = SimWriter(cluster, md)
    for _ in range(12):
        writer.write(b"p" * 10)
    assert writer.tracker.last_add_confirmed == 11  # entries up to 11 confirmed
    entry_id, targets = writer.add(b"p" * 10)
    assert (entry_id, targets) == (12, ("b0", "b1"))
    writer.send(12, "b0")  # entry 12 written partially: its add to b1 is still in flight
    driver = start_recovery(cluster, md)
    driver.run()
    assert driver.recovery.start_entry == 12  # the next after the latest LAC (11, in entry 12's header)
    assert [a.entry_id for a in driver.actions if isinstance(a, WriteBack)] == [12]
    stored = assert_closed(driver, 12, 130)  # 13 was absent: nowhere it would be, had it been written
    assert cluster.holders(12) == {"b0", "b1"}  # written back to the whole write quorum
    writer.send(12, "b1")  # the old writer's add of 12 finally arrives
    assert writer.fenced and writer.tracker.last_add_confirmed == 11
    assert writer.confirmed[-1] <= stored.last_entry_id


@pytest.mark.parametrize("order", ["negatives_first", "fifo"])
def test_F3_lost_fence_message_no_confirmed_entry_beyond_the_closed_end(order):
    md = ledger(3, 3, 2)
    cluster = SimCluster(B3)
    writer = SimWriter(cluster, md)
    for _ in range(10):
        writer.write(b"q" * 10)
    writer.add(b"q" * 10)
    writer.send(10, "b2")  # entry 10 on Qa - 1 = 1 bookie
    driver = start_recovery(cluster, md, hang={("b2", "lac", -1)},  # b2 never gets the fence
                            pick=negatives_first if order == "negatives_first" else None)
    driver.run()
    stored = driver.closed
    assert stored is not None and stored.last_entry_id in (9, 10)
    assert all(a.fence for a in driver.actions if isinstance(a, ReadEntry) and a.entry_id >= 9)
    assert cluster["b2"].fenced  # the recovery read fenced it
    writer.send(10, "b0")
    writer.send(10, "b1")
    assert writer.fenced
    assert max(writer.confirmed) <= stored.last_entry_id
    if order == "negatives_first":
        assert stored.last_entry_id == 9


def test_R1_empty_ledger_closes_at_minus_one():
    md = ledger(3, 3, 2)
    driver = start_recovery(SimCluster(B3), md)
    driver.run()
    assert_closed(driver, -1, 0)
    assert not any(isinstance(a, WriteBack) for a in driver.actions)


def test_R1_a_ledger_bookies_know_but_hold_no_entry_closes_at_minus_one():
    cluster = SimCluster(B3)
    for bookie in cluster.bookies.values():
        bookie.known = True
    driver = start_recovery(cluster, ledger(3, 2, 2))
    driver.run()
    assert_closed(driver, -1, 0)


def test_R2_lac_trailing_by_k_reads_forward_and_writes_back_to_the_full_write_quorum():
    md = ledger(3, 3, 2)
    cluster = SimCluster(B3)
    holders = full_copies(md, 10)
    for entry_id in (7, 8, 9):
        holders[entry_id] = {"b0", "b2"}  # confirmed with Qa copies, not on b1
    store_entries(cluster, holders, [min(e - 1, 5) for e in range(10)])  # LAC trails by up to 4
    driver = start_recovery(cluster, md)
    driver.run()
    assert driver.recovery.start_entry == 6
    assert [a.entry_id for a in driver.actions if isinstance(a, WriteBack)] == [6, 7, 8, 9]
    assert_closed(driver, 9, 100)
    assert all(cluster.holders(e) == set(B3) for e in (7, 8, 9))


def test_R3_parallel_recoverers_converge_through_cas():
    md = ledger(3, 3, 2)
    cluster = SimCluster(B3)
    store_entries(cluster, full_copies(md, 10) + [{"b2"}], [e - 1 for e in range(11)])
    meta = SimMetadata(md)
    first = start_recovery(cluster, md, meta, hang={("b2", "read", 10)})
    second = start_recovery(cluster, md, meta)  # also finds the ledger IN_RECOVERY: no second write
    assert second.version == first.version
    first.run()
    assert first.closed.last_entry_id == 9  # b2's copy of 10 was not heard: 2 negatives decide
    second.run()  # b2 answers: writes 10 back and tries to close at 10, loses the CAS
    assert second.outcome.metadata.last_entry_id == 10
    assert second.closed == first.closed and meta.read()[0].last_entry_id == 9


def test_R3_recovery_racing_the_writers_close():
    md = ledger(3, 3, 2)
    meta = SimMetadata(md)
    start_recovery(SimCluster(B3), md, meta)  # the recoverer marks IN_RECOVERY first
    resolution = resolve_close_conflict(meta.read()[0], -1, 0)
    assert resolution.decision is Decision.ERROR and "recovered" in resolution.reason
    closed_first = close_metadata(md, -1, 0)  # the writer wins instead
    assert mark_in_recovery(closed_first).reason == "already closed: nothing to recover"
    with pytest.raises(LedgerClosedError, match="nothing to recover"):
        LedgerRecovery(closed_first)


def test_R4_absent_is_decided_without_waiting_for_a_hanging_bookie():
    md = ledger(4, 3, 2, ["b0", "b1", "b2", "b3"])
    cluster = SimCluster(["b0", "b1", "b2", "b3"])
    store_entries(cluster, full_copies(md, 5), [e - 1 for e in range(5)])
    driver = start_recovery(cluster, md, hang={("b1", "read", 5)})  # entry 5: b1, b2, b3
    driver.run()
    assert_closed(driver, 4, 50)
    assert sum(1 for tag in driver.delivered if tag.startswith("read 5")) == 2


def test_R5_only_unknowns_below_the_threshold_fail_and_do_not_close():
    md = ledger(3, 3, 2)
    cluster = SimCluster(B3)
    store_entries(cluster, full_copies(md, 4), [e - 1 for e in range(4)])
    driver = start_recovery(cluster, md)
    original = cluster["b1"].read
    cluster["b1"].read = lambda e, fence: ReadAnswer.unknown("IO_ERROR") if e == 4 else original(e, fence)
    cluster["b2"].read = lambda e, fence: ReadAnswer.unknown("timeout")
    driver.run()
    assert_not_closed(driver, "entry", "only 1 explicit", "of the 2 needed")


def test_R5_fencing_that_cannot_cover_fails_without_closing():
    md = ledger(3, 3, 2)
    cluster = SimCluster(B3)
    cluster["b1"].down = cluster["b2"].down = True
    driver = start_recovery(cluster, md)
    driver.run()
    assert_not_closed(driver, "cannot fence", "b1: timeout")


def test_R6_lac_readable_but_write_back_impossible_fails_without_closing():
    md = ledger(3, 3, 3)
    cluster = SimCluster(B3)
    store_entries(cluster, full_copies(md, 6), [min(e - 1, 2) for e in range(6)])
    driver = start_recovery(cluster, md, write_fail={"b2"})  # no spare bookie either
    driver.run()
    assert_not_closed(driver, "write-back", "impossible", "need 1 bookie(s)")


def test_R7_a_bookie_failing_during_write_back_is_replaced_and_the_ledger_closes():
    md = ledger(3, 3, 2)
    cluster = SimCluster(B3 + ["b3"])
    store_entries(cluster, full_copies(md, 6), [min(e - 1, 2) for e in range(6)])
    driver = start_recovery(cluster, md, spares=("b3",), write_fail={"b1"})
    driver.run()
    stored = assert_closed(driver, 5, 60)
    assert stored.fragments == (Fragment(0, ("b0", "b1", "b2")), Fragment(3, ("b0", "b3", "b2")))
    check_transition(md.with_changes(state=IN_RECOVERY), stored)
    for entry_id in (3, 4, 5):  # every moved entry has >= Qa copies in its new ensemble
        assert len(cluster.holders(entry_id) & set(stored.ensemble_for(entry_id))) >= 2
    assert driver.meta.version == 2  # mark + close: the new fragment was published with the close


def test_R7_reads_after_a_write_back_ensemble_change_still_use_the_original_ensemble():
    # Entries 9..11 were confirmed on b0, b1 (Qa = 2); the bookies' LAC says 8. b1 then fails
    # recovery's write-back and is replaced by b3, which never had 10 or 11: reading those from
    # the new ensemble would find two explicit negatives (b2, b3) and truncate confirmed data.
    md = ledger(3, 3, 2)
    cluster = SimCluster(B3 + ["b3"])
    holders = full_copies(md, 9) + [{"b0", "b1"}] * 3
    store_entries(cluster, holders, [e - 1 for e in range(9)] + [7, 7, 8])
    driver = start_recovery(cluster, md, spares=("b3",), write_fail={"b1"}, pick=negatives_first)
    driver.run()
    assert driver.recovery.start_entry == 9
    assert any(isinstance(a, ChooseReplacements) for a in driver.actions)
    reads = {a.entry_id: a.targets for a in driver.actions if isinstance(a, ReadEntry)}
    assert reads[11] == ("b2", "b0", "b1") and reads[12] == ("b0", "b1", "b2")
    stored = assert_closed(driver, 11, 120)
    assert stored.fragments[-1].bookies == ("b0", "b3", "b2")


def test_R8_multi_fragment_with_current_ensemble_lac_minus_one_starts_at_the_fragment():
    names = ["b0", "b1", "b2", "b3", "b4", "b5"]
    md = ledger(3, 3, 2).with_changes(fragments=(Fragment(0, ("b0", "b1", "b2")), Fragment(10, ("b3", "b4", "b5"))))
    cluster = SimCluster(names)
    store_entries(cluster, full_copies(ledger(3, 3, 2), 10), [e - 1 for e in range(10)])
    driver = start_recovery(cluster, md)
    driver.run()
    assert driver.recovery.start_entry == 10
    reads = [a for a in driver.actions if isinstance(a, ReadEntry)]
    assert [(a.entry_id, a.targets) for a in reads] == [(9, ("b0", "b1", "b2")), (10, ("b4", "b5", "b3"))]
    stored = assert_closed(driver, 9, 100)
    assert [f.first_entry_id for f in stored.fragments] == [0, 10]


def test_recovery_refuses_open_metadata_and_ignores_stale_answers():
    with pytest.raises(RecoveryError, match="mark it IN_RECOVERY"):
        LedgerRecovery(ledger(3, 3, 2))
    recovery = LedgerRecovery(ledger(3, 3, 2).with_changes(state=IN_RECOVERY))
    assert recovery.start() == (FenceAndReadLac(("b0", "b1", "b2")),)
    assert recovery.on_read_answer(4, "b0", ReadAnswer.no_such_entry()) == ()
    recovery.on_lac_answer("b0", LacAnswer.ok(-1))
    actions = recovery.on_lac_answer("b1", LacAnswer.no_such_ledger())
    assert actions == (ReadEntry(0, ("b0", "b1", "b2"), True),)
    assert recovery.on_lac_answer("b2", LacAnswer.ok(5)) == ()  # after coverage: ignored
    assert recovery.phase is RecoveryPhase.READING


def run_random_recovery(rng, trial, window=1):
    e = rng.randint(1, 5)
    qw = rng.randint(1, e)
    qa = rng.randint(1, qw)
    names = [f"b{i}" for i in range(e)]
    md = ledger(e, qw, qa, names)
    cluster = SimCluster(names + ["s0", "s1", "s2"])
    count = rng.randint(0, 8)
    holders, confirmed = [], -1
    for entry_id in range(count):
        members = write_set_bookies(entry_id, names, qw)
        chosen = set(rng.sample(members, rng.randint(0, qw)))
        holders.append(chosen)
        if confirmed == entry_id - 1 and len(chosen) >= qa:
            confirmed = entry_id
    lacs = [max(-1, min(i - 1 - rng.randint(0, 2), confirmed)) for i in range(count)]
    store_entries(cluster, holders, lacs)
    down = set(rng.sample(names, rng.randint(0, max(0, e - 1)))) if rng.random() < 0.5 else set()
    for name in down:
        cluster[name].down = True
    driver = start_recovery(cluster, md, spares=("s0", "s1", "s2"),
                            pick=lambda queue: rng.randrange(len(queue)), seed=trial,
                            flaky=0.15 if trial % 2 else 0.0, window=window)
    driver.run()
    return driver, cluster, confirmed, down, qw - qa + 1


@pytest.mark.parametrize("window", [1, 3])
def test_property_random_recoveries_are_safe_and_decide_absent_only_on_enough_negatives(window):
    rng = random.Random(424242)
    closed = failed = undecided = moved = 0
    for trial in range(400):
        driver, cluster, confirmed, down, threshold = run_random_recovery(rng, trial, window)
        assert driver.outcome is not None, trial  # never stuck without hangs
        if isinstance(driver.outcome, RecoveryFailed):
            failed += 1
            undecided += "explicit 'no such entry'" in driver.outcome.reason
            assert down or trial % 2, (trial, driver.outcome.reason)  # all bookies up and answering: closes
            assert driver.meta.read()[0].state == IN_RECOVERY
            continue
        closed += 1
        stored = driver.closed
        moved += len(stored.fragments) > 1
        assert stored.last_entry_id >= confirmed, trial  # persistence
        end = stored.last_entry_id + 1
        negatives = [t for t in driver.delivered if t.startswith(f"read {end} ") and "negative" in t]
        assert len(negatives) >= threshold, (trial, driver.delivered)
        assert all(t.endswith("True") for t in driver.delivered if t.startswith(f"read {end} "))
        for entry_id in range(driver.recovery.start_entry, end):
            holders = cluster.holders(entry_id) & set(stored.ensemble_for(entry_id))
            assert len(holders) >= stored.ack_quorum, trial
        assert all(a.entry_id < end for a in driver.actions if isinstance(a, WriteBack)), trial  # R9
    assert closed > 200 and failed > 10 and undecided > 5 and moved > 5  # every path was exercised
