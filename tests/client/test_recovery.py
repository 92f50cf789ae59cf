"""Fencing and recovery over fake bookies: docs/protocol.md F1-F4 and R1-R9."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.errors import LedgerFencedError, NoSuchEntryError, RecoveryError
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY
from tests.client.conftest import PASSWORD, wait_until
from tests.client.invariants import Confirmed, check_invariants


def write(writer, confirmed: Confirmed, count: int, start: int = 0) -> None:
    for index in range(start, start + count):
        confirmed.append(writer, b"entry-%d" % index).result(10)


def write_set(writer, entry_id: int) -> list[str]:
    md = writer.metadata
    ensemble = md.ensemble_for(entry_id)
    return [ensemble[(entry_id + i) % md.ensemble_size] for i in range(md.write_quorum)]


def test_F1_example_entries_to_11_confirmed_12_partial(client, make_client, cluster, store):
    writer = client.create_ledger(3, 2, 2, password=PASSWORD)
    confirmed = Confirmed()
    write(writer, confirmed, 12)
    first, second = write_set(writer, 12)
    held = cluster.hold_request(second, op="add", entry_id=12, recovery=False)
    partial = confirmed.append(writer, b"entry-12")
    cluster.settle()
    assert cluster.holders(writer.ledger_id, 12) == {first}
    recoverer = make_client(seed=2)
    reader = recoverer.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
    assert (reader.is_closed, reader.last_add_confirmed) == (True, 12)
    assert cluster.holders(writer.ledger_id, 12) == {first, second}, "entry 12 not written back to its quorum"
    held.release()  # the old writer's add of 12 now reaches a fenced bookie
    with pytest.raises(LedgerFencedError):
        partial.result(10)
    with pytest.raises(LedgerFencedError):
        writer.append(b"entry-13")
    entries = check_invariants(recoverer, make_client(seed=3), store, writer.ledger_id, PASSWORD, confirmed)
    assert entries[12] == (12, b"entry-12")


def test_F2_open_without_recovery_does_not_fence_and_can_wait(client, make_client, cluster):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    for index in range(5):
        writer.append(b"e%d" % index)
    tail = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    assert not tail.is_closed and tail.last_add_confirmed == 3  # entry 4 carries LAC 3
    assert [e.data for e in tail.read()] == [b"e0", b"e1", b"e2", b"e3"]
    assert not any(cluster[b].is_fenced(writer.ledger_id) for b in writer.metadata.current_fragment.bookies)
    assert tail.wait_for_entry(5, timeout=0.2) is False

    appended = []
    thread = threading.Thread(target=lambda: appended.extend(writer.append(b"e%d" % i) for i in range(5, 8)))
    thread.start()
    assert tail.wait_for_entry(6, timeout=10) is True
    thread.join(10)
    assert [e.data for e in tail.read(5, 6)] == [b"e5", b"e6"]
    writer.close()
    assert tail.wait_for_entry(7, timeout=10) is True and tail.is_closed
    with pytest.raises(NoSuchEntryError, match="will never exist"):
        tail.wait_for_entry(8, timeout=1)
    assert appended == [5, 6, 7]


def test_F3_lost_fence_message_and_entry_on_qa_minus_one(client, make_client, cluster, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    write(writer, confirmed, 5)
    a, b, c = write_set(writer, 5)
    holds = [cluster.hold_request(bookie, op="add", entry_id=5, recovery=False) for bookie in (b, c)]
    late = confirmed.append(writer, b"entry-5")  # reaches only `a`: Qa - 1 copies
    cluster.settle()
    lost_fence = cluster.drop(c, op="fence", entry_id=0)  # the fencing LAC read to `c` is lost
    recoverer = make_client(seed=2)
    closed = recoverer.open_ledger(writer.ledger_id, PASSWORD)
    assert lost_fence.matched == 1
    assert cluster[c].is_fenced(writer.ledger_id), "recovery's reads did not fence the bookie that missed the fence"
    for hold in holds:
        hold.release()
    cluster.settle()
    try:
        late.result(10)
    except LedgerFencedError:
        pass
    with pytest.raises(LedgerFencedError):
        writer.append(b"entry-6")
    assert max(confirmed.entries) <= closed.last_add_confirmed
    check_invariants(recoverer, make_client(seed=3), store, writer.ledger_id, PASSWORD, confirmed)


def test_F4_fencing_an_unseen_ledger_creates_it_fenced(client, make_client, cluster):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    reader = make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD)
    assert all(cluster[b].is_fenced(writer.ledger_id) for b in writer.metadata.current_fragment.bookies)
    with pytest.raises(LedgerFencedError):
        writer.append(b"too late")
    assert (reader.is_closed, reader.last_add_confirmed) == (True, -1)


def test_R1_empty_ledger_is_closed_at_minus_one(client, make_client, store):
    writer = client.create_ledger(3, 2, 2, password=PASSWORD)
    client.close()
    recoverer = make_client(seed=2)
    reader = recoverer.open_ledger(writer.ledger_id, PASSWORD)
    md = recoverer.ledger_metadata(writer.ledger_id)
    assert (md.state, md.last_entry_id, md.length) == (CLOSED, -1, 0)
    assert list(reader.read()) == []
    check_invariants(recoverer, make_client(seed=3), store, writer.ledger_id, PASSWORD)


def test_R2_lac_trailing_by_k_entries_is_read_forward_and_written_back(make_client, cluster, store):
    # no explicit LAC: its timer (0.1 s idle) could tell the bookies LAC 14 before the check below, on a busy host
    client = make_client(explicit_lac_interval_s=0)
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    write(writer, confirmed, 10)
    a, b, c = writer.metadata.current_fragment.bookies
    hold = cluster.hold_request(c, op="add", recovery=False)
    answers_of_b = cluster.hold(b, op="add")  # no ack quorum until all 5 are sent: each carries LAC 9
    burst = [confirmed.append(writer, b"entry-%d" % i) for i in range(10, 15)]
    wait_until(lambda: all(cluster.holders(writer.ledger_id, e) == {a, b} for e in range(10, 15)), 10)
    answers_of_b.release()
    assert [f.result(10) for f in burst] == list(range(10, 15))
    assert all(cluster.holders(writer.ledger_id, e) == {a, b} for e in range(10, 15))
    assert max(cluster[x].last_add_confirmed(writer.ledger_id) for x in (a, b, c)) == 9
    client.close()  # the writer dies
    recoverer = make_client(seed=2)
    reader = recoverer.open_ledger(writer.ledger_id, PASSWORD)
    assert reader.last_add_confirmed == 14
    assert all(cluster.holders(writer.ledger_id, e) == {a, b, c} for e in range(10, 15)), "not written back"
    entries = check_invariants(recoverer, make_client(seed=3), store, writer.ledger_id, PASSWORD, confirmed)
    assert [data for _, data in entries[10:]] == [b"entry-%d" % i for i in range(10, 15)]
    hold.release()


def test_R3_parallel_recoverers_converge(client, make_client, cluster, store):
    writer = client.create_ledger(3, 2, 2, password=PASSWORD)
    confirmed = Confirmed()
    write(writer, confirmed, 8)
    first, second = write_set(writer, 8)
    cluster.hold_request(second, op="add", entry_id=8, recovery=False)
    confirmed.append(writer, b"entry-8")
    cluster.settle()
    recoverers = [make_client(seed=10 + i) for i in range(3)]
    ends: list = []
    errors: list = []

    def recover(recoverer) -> None:
        try:
            ends.append(recoverer.open_ledger(writer.ledger_id, PASSWORD).last_add_confirmed)
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)
    threads = [threading.Thread(target=recover, args=(r,)) for r in recoverers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and ends == [8, 8, 8]
    check_invariants(recoverers[0], recoverers[1], store, writer.ledger_id, PASSWORD, confirmed)


def test_R3_recovery_racing_the_writers_close_converges(client, make_client, store):
    for _ in range(3):
        writer = client.create_ledger(3, 3, 2, password=PASSWORD)
        confirmed = Confirmed()
        write(writer, confirmed, 6)
        outcome: dict = {}

        def close() -> None:
            try:
                writer.close()
                outcome["close"] = "ok"
            except LedgerFencedError:
                outcome["close"] = "fenced"
        thread = threading.Thread(target=close)
        thread.start()
        reader = make_client(seed=7).open_ledger(writer.ledger_id, PASSWORD)
        thread.join(30)
        md = client.ledger_metadata(writer.ledger_id)
        assert md.state == CLOSED and reader.last_add_confirmed == md.last_entry_id == 5
        assert outcome["close"] == "ok"  # both ended at entry 5: the writer's close agrees either way
        check_invariants(client, make_client(seed=8), store, writer.ledger_id, PASSWORD, confirmed)


def test_R4_decided_without_waiting_for_a_hanging_bookie(make_client, cluster, store):
    client = make_client()
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    write(writer, confirmed, 4)
    hanging = writer.metadata.current_fragment.bookies[2]
    client.close()
    hang = cluster.hold_request(hanging, op="fence")
    recoverer = make_client(seed=2, read_timeout_s=120.0)
    reader = recoverer.open_ledger(writer.ledger_id, PASSWORD)
    assert reader.last_add_confirmed == 3
    assert hang.parked, "the hanging bookie's requests were answered: nothing hung"
    hang.release()
    check_invariants(recoverer, make_client(seed=3), store, writer.ledger_id, PASSWORD, confirmed)


def test_R5_only_unknowns_fail_recovery_without_closing(client, make_client, cluster, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    write(writer, confirmed, 5)
    a, b, c = writer.metadata.current_fragment.bookies
    client.close()
    rules = [cluster.fail(bookie, op="fence", status="IO_ERROR", entry_id=5) for bookie in (b, c)]
    recoverer = make_client(seed=2)
    with pytest.raises(RecoveryError, match="cannot be decided"):
        recoverer.open_ledger(writer.ledger_id, PASSWORD)
    assert recoverer.ledger_metadata(writer.ledger_id).state == IN_RECOVERY
    for rule in rules:
        rule.release()
    assert recoverer.open_ledger(writer.ledger_id, PASSWORD).last_add_confirmed == 4  # liveness
    check_invariants(recoverer, make_client(seed=3), store, writer.ledger_id, PASSWORD, confirmed)


@pytest.mark.bookies(3)
def test_R6_write_back_impossible_fails_without_closing(client, make_client, cluster):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    write(writer, Confirmed(), 3)
    a, b, c = write_set(writer, 3)
    for bookie in (b, c):
        cluster.hold_request(bookie, op="add", recovery=False)
    writer.append_async(b"partial")
    cluster.settle()
    client.close()
    cluster.fail(b, op="add", recovery=True, status="IO_ERROR")
    cluster.fail(c, op="add", recovery=True, status="IO_ERROR")
    with pytest.raises(RecoveryError, match="write-back .* is impossible"):
        make_client(seed=2).open_ledger(writer.ledger_id, PASSWORD)
    assert make_client(seed=3).ledger_metadata(writer.ledger_id).state == IN_RECOVERY


def test_R7_bookie_failing_during_write_back_is_replaced(client, make_client, cluster, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    write(writer, confirmed, 3)
    a, b, c = write_set(writer, 3)
    spare = (set(cluster.bookies) - {a, b, c}).pop()
    for bookie in (b, c):
        cluster.hold_request(bookie, op="add", recovery=False)
    writer.append_async(b"entry-3")
    cluster.settle()
    client.close()
    cluster.fail(b, op="add", recovery=True, status="IO_ERROR")
    recoverer = make_client(seed=2)
    assert recoverer.open_ledger(writer.ledger_id, PASSWORD).last_add_confirmed == 3
    md = recoverer.ledger_metadata(writer.ledger_id)
    assert [f.first_entry_id for f in md.fragments] == [0, 3]
    assert b not in md.fragments[1].bookies and spare in md.fragments[1].bookies
    assert spare in cluster.holders(writer.ledger_id, 3)
    check_invariants(recoverer, make_client(seed=3), store, writer.ledger_id, PASSWORD, confirmed)


@pytest.mark.bookies(6)
def test_R8_current_ensemble_reporting_minus_one_starts_at_its_fragment(client, make_client, cluster, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    write(writer, confirmed, 5)
    old = writer.metadata.current_fragment.bookies
    new = sorted(set(cluster.bookies) - set(old))
    for bookie in new:
        cluster.hold_request(bookie, op="add", recovery=False)
    for bookie in old:
        cluster.set_down(bookie)
    writer.append_async(b"entry-5")
    wait_until(lambda: set(writer.metadata.current_fragment.bookies) == set(new), what="both ensemble changes")
    client.close()  # the writer dies; the new ensemble never stored anything
    for bookie in old:
        cluster.set_down(bookie, down=False)
    recoverer = make_client(seed=2)
    reader = recoverer.open_ledger(writer.ledger_id, PASSWORD)
    md = recoverer.ledger_metadata(writer.ledger_id)
    assert reader.last_add_confirmed == 4 and md.last_entry_id == 4
    assert [f.first_entry_id for f in md.fragments] == [0, 5], "recovery created an earlier fragment"
    check_invariants(recoverer, make_client(seed=3), store, writer.ledger_id, PASSWORD, confirmed)


@pytest.mark.parametrize("ensemble, window", [(3, 1), (3, 8), (4, 32)])
def test_R9_reading_forward_with_a_window_uses_range_reads(client, make_client, cluster, store, ensemble, window):
    writer = client.create_ledger(ensemble, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    write(writer, confirmed, 10)
    *others, last = writer.metadata.current_fragment.bookies
    holds = [cluster.hold_request(last, op="add", recovery=False)]  # never stores the later entries
    holds += [cluster.hold(b, op="add", recovery=False) for b in others]  # store them; answers held
    for index in range(10, 40):  # nothing past 9 is confirmed: every entry carries LAC 9
        confirmed.append(writer, b"entry-%d" % index)
    cluster.settle()
    client.close()  # the writer dies
    before = len(cluster.requests)
    reader = make_client(seed=2, recovery_read_window=window).open_ledger(writer.ledger_id, PASSWORD)
    assert reader.last_add_confirmed == 39
    md = writer.metadata
    # closed once Qa copies of each were acknowledged; the third may still be on its way
    wait_until(lambda: all(cluster.holders(writer.ledger_id, e) == set(write_set(writer, e)) for e in range(10, 40)),
               what="every entry written back to its whole write set")
    reads = [r for r in cluster.requests[before:] if r[0] == "fence" and r[3] >= 10]
    if window == 1:
        assert all(first == last_id for _, _, _, first, last_id, _ in reads)
    else:  # range reads per bookie (and stripe), not one read per entry and bookie
        assert len(reads) < (40 - 10) * md.write_quorum // 2
        assert any(last_id - first >= (ensemble if ensemble > 3 else 1) for _, _, _, first, last_id, _ in reads)
    check_invariants(make_client(seed=3), make_client(seed=4), store, writer.ledger_id, PASSWORD, confirmed)
    for hold in holds:
        hold.release()


def test_R9_a_copy_past_the_end_is_not_written_back(client, make_client, cluster, store):
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    confirmed = Confirmed()
    write(writer, confirmed, 10)
    a, b, c = write_set(writer, 10)
    holds = [cluster.hold_request(x, op="add", entry_id=10, recovery=False) for x in (b, c)]
    holds += [cluster.hold_request(x, op="add", entry_id=11, recovery=False) for x in (a, c)]
    confirmed.append(writer, b"entry-10")  # on `a` only: never confirmed
    confirmed.append(writer, b"entry-11")  # on `b` only: the old writer's later add
    cluster.settle()
    client.close()
    # b says "no 10" then gives 11 at once; c's "no 10" (the second negative: 10 absent) comes later,
    # a's copy of 10 later still. So 11 is decided present before 10 is decided absent.
    slow = [cluster.delay(c, op="fence", seconds=0.5), cluster.delay(a, op="fence", seconds=1.5)]
    before = len(cluster.requests)
    reader = make_client(seed=2, recovery_read_window=8).open_ledger(writer.ledger_id, PASSWORD)
    assert reader.last_add_confirmed == 9
    assert ("fence", b, writer.ledger_id, 11, 17, True) in cluster.requests[before:]  # b was asked for 11 on
    assert cluster.holders(writer.ledger_id, 10) == {a} and cluster.holders(writer.ledger_id, 11) == {b}
    check_invariants(make_client(seed=3), make_client(seed=4), store, writer.ledger_id, PASSWORD, confirmed)
    for rule in slow + holds:
        rule.release()
