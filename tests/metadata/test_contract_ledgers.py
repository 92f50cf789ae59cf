"""MetadataStore contract, ledgers and ids: the same tests against SQLite and ZooKeeper."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.errors import (InvalidArgumentError, MetadataError, MetadataExistsError,
                                   MetadataVersionConflictError, NoSuchLedgerError)
from pyspark_ledger.metadata.model import CLOSED, IN_RECOVERY, Fragment
from tests.metadata.helpers import Recorder, ledger

# Ids chosen to land in different ZooKeeper subtrees (and leaf directories).
SPREAD_IDS = [123_456_789_012, 5, 10_000, 9_999, 2**63 - 1, 0, 10_001, 100_000_000]


def test_create_then_read_returns_the_metadata_at_version_0(store):
    metadata = ledger(7, custom_metadata={"app": b"\x00\xff"})
    assert store.create_ledger(metadata) == 0
    stored = store.read_ledger(7)
    assert stored.version == 0
    assert stored.value == metadata


def test_each_write_adds_one_to_the_version(store):
    store.create_ledger(ledger(1))
    recovering = ledger(1, state=IN_RECOVERY)
    assert store.write_ledger(recovering, 0) == 1
    closed = recovering.with_changes(state=CLOSED, last_entry_id=41, length=4200,
                                     fragments=(Fragment(0, ("b1", "b2", "b3")),
                                                Fragment(12, ("b4", "b2", "b3"))))
    assert store.write_ledger(closed, 1) == 2
    stored = store.read_ledger(1)
    assert (stored.version, stored.value) == (2, closed)


def test_creating_an_existing_ledger_fails_and_keeps_the_first(store):
    store.create_ledger(ledger(3))
    with pytest.raises(MetadataExistsError, match="ledger 3"):
        store.create_ledger(ledger(3, bookies=("x", "y", "z")))
    assert store.read_ledger(3).value == ledger(3)


def test_stale_compare_and_set_raises_and_changes_nothing(store, open_store):
    other = open_store()
    store.create_ledger(ledger(9))
    assert other.write_ledger(ledger(9, state=IN_RECOVERY), 0) == 1
    with pytest.raises(MetadataVersionConflictError, match="ledger 9"):
        store.write_ledger(ledger(9, state=CLOSED), 0)
    stored = store.read_ledger(9)
    assert (stored.version, stored.value.state) == (1, IN_RECOVERY)


def test_missing_ledger_raises_no_such_ledger(store):
    with pytest.raises(NoSuchLedgerError, match="ledger 404"):
        store.read_ledger(404)
    with pytest.raises(NoSuchLedgerError):
        store.write_ledger(ledger(404), 0)
    with pytest.raises(NoSuchLedgerError):
        store.delete_ledger(404)


def test_delete_with_a_stale_version_conflicts_then_succeeds_with_the_right_one(store):
    store.create_ledger(ledger(11))
    store.write_ledger(ledger(11, state=CLOSED), 0)
    with pytest.raises(MetadataVersionConflictError):
        store.delete_ledger(11, expected_version=0)
    assert store.read_ledger(11).version == 1
    store.delete_ledger(11, expected_version=1)
    with pytest.raises(NoSuchLedgerError):
        store.read_ledger(11)


def test_delete_without_version_and_re_create_starts_again_at_0(store):
    store.create_ledger(ledger(12))
    store.write_ledger(ledger(12, state=CLOSED), 0)
    store.delete_ledger(12)
    assert store.create_ledger(ledger(12)) == 0
    assert store.read_ledger(12).version == 0


def test_list_ledgers_is_ascending_across_subtrees(store):
    for ledger_id in SPREAD_IDS:
        store.create_ledger(ledger(ledger_id))
    assert list(store.list_ledgers()) == sorted(SPREAD_IDS)
    store.delete_ledger(10_000)
    assert list(store.list_ledgers()) == sorted(set(SPREAD_IDS) - {10_000})


def test_list_ledgers_of_an_empty_store_is_empty(store):
    assert list(store.list_ledgers()) == []


def test_new_ledger_ids_are_unique_across_threads_and_store_objects(store, open_store):
    stores = [store, open_store()]
    found: list[list[int]] = [[] for _ in range(4)]

    def take(index: int) -> None:
        for _ in range(40):
            found[index].append(stores[index % 2].new_ledger_id())

    threads = [threading.Thread(target=take, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    ids = [i for chunk in found for i in chunk]
    assert len(ids) == 160
    assert len(set(ids)) == 160
    assert all(0 <= i < 2**63 for i in ids)


def test_generated_id_can_be_used_to_create_a_ledger(store):
    ledger_id = store.new_ledger_id()
    store.create_ledger(ledger(ledger_id))
    assert list(store.list_ledgers()) == [ledger_id]


def test_watch_reports_changes_and_deletion(store, open_store):
    store.create_ledger(ledger(21))
    recorder = Recorder()
    store.watch_ledger(21, recorder)
    writer = open_store()
    writer.write_ledger(ledger(21, state=IN_RECOVERY), 0)
    seen = recorder.wait_for(lambda e: e is not None and e.version == 1, "version 1")
    assert seen.value.state == IN_RECOVERY
    writer.delete_ledger(21)
    recorder.wait_for(lambda e: e is None, "the deletion")
    assert all(e is None or e.version == 1 for e in recorder.events)


def test_watch_on_an_absent_ledger_reports_its_creation(store):
    recorder = Recorder()
    store.watch_ledger(22, recorder)
    store.create_ledger(ledger(22))
    seen = recorder.wait_for(lambda e: e is not None, "the creation")
    assert (seen.version, seen.value) == (0, ledger(22))


def test_cancelled_watch_stays_silent(store):
    store.create_ledger(ledger(23))
    store.create_ledger(ledger(24))
    cancelled, sentinel = Recorder(), Recorder()
    store.watch_ledger(23, cancelled).cancel()
    store.watch_ledger(24, sentinel)
    store.write_ledger(ledger(23, state=CLOSED), 0)
    store.write_ledger(ledger(24, state=CLOSED), 0)
    sentinel.wait_for(lambda e: e is not None and e.version == 1, "the sentinel's change")
    assert cancelled.events == []


def test_failing_watch_callback_does_not_stop_later_notifications(store):
    store.create_ledger(ledger(25))
    recorder = Recorder()

    def explode(event):
        recorder(event)
        raise RuntimeError("callback bug")

    store.watch_ledger(25, explode)
    store.write_ledger(ledger(25, state=IN_RECOVERY), 0)
    recorder.wait_for(lambda e: e is not None and e.version == 1, "version 1")
    store.write_ledger(ledger(25, state=CLOSED), 1)
    recorder.wait_for(lambda e: e is not None and e.version == 2, "version 2")


@pytest.mark.parametrize("bad_id", [-1, 2**63, "7", 1.0, True, None])
def test_bad_ledger_ids_are_rejected(store, bad_id):
    with pytest.raises(InvalidArgumentError, match="ledger id"):
        store.read_ledger(bad_id)


def test_oversized_metadata_is_rejected_before_reaching_the_store(store):
    huge = ledger(30, custom_metadata={"blob": b"x" * 1_100_000})
    with pytest.raises(InvalidArgumentError, match="limit"):
        store.create_ledger(huge)
    with pytest.raises(NoSuchLedgerError):
        store.read_ledger(30)


def test_closed_store_refuses_work_and_close_is_idempotent(open_store):
    closing = open_store()
    closing.create_ledger(ledger(31))
    closing.close()
    closing.close()
    with pytest.raises(MetadataError, match="closed"):
        closing.read_ledger(31)


def test_read_ledger_latest_sees_what_another_client_created(store, open_store):
    # another client of the same store (for ZooKeeper: its own session) creates the ledger; the latest read
    # catches its server up first (on a one-server ensemble this checks that the call works)
    with pytest.raises(NoSuchLedgerError):
        store.read_ledger_latest(77)
    open_store().create_ledger(ledger(77))
    assert store.read_ledger_latest(77).value == ledger(77)
