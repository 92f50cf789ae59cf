"""The collector thread's passes over a real storage, with a scripted metadata listing (failures, races)."""
from __future__ import annotations

import logging
import time

import pytest

from bookie_server.gc import GarbageCollector
from bookie_server.metrics import BookieMetrics
from bookie_server.storage import AddOp, BookieStorage, StorageConfig
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.errors import MetadataError, NoSuchLedgerError, StorageError
from pyspark_ledger.metadata.model import CLOSED, OPEN, Fragment, LedgerMetadata
from pyspark_ledger.metadata.store import Versioned
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

from .conftest import wait_until

KEY = master_key(b"gc")
CODEC = EntryCodec()


class ScriptedStore:
    """A metadata store whose listing is scripted: a set of ids, an error, or a callback run mid-listing."""

    uri = "scripted://"

    def __init__(self, listed=()) -> None:
        self.listed = set(listed)
        self.error: Exception | None = None
        self.during_listing = None
        self.listings = 0
        self.metadata: dict[int, LedgerMetadata] = {}  # for read_ledger (over-replicated ledgers)
        self.read_error: Exception | None = None
        self.reads = 0

    def read_ledger(self, ledger_id):
        self.reads += 1
        if self.read_error is not None:
            raise self.read_error
        if ledger_id not in self.metadata:
            raise NoSuchLedgerError(f"no ledger {ledger_id}")
        return Versioned(self.metadata[ledger_id], 1)

    def list_ledgers(self):
        self.listings += 1
        if self.during_listing is not None:
            self.during_listing()
        for ledger_id in sorted(self.listed):
            if self.error is not None:
                raise self.error  # fails part-way through the listing
            yield ledger_id


def add(storage: BookieStorage, ledger_id: int, entries: int = 8) -> None:
    """Entries of 2 KiB, one batch each: every ledger fills its own entry logs (4 KiB each)."""
    for entry_id in range(entries):
        op = AddOp(ledger_id, entry_id, KEY, CODEC.encode(ledger_id, entry_id, entry_id - 1, 0, b"x" * 2048))
        assert storage.add_entries([op]).result(30) == [pb.OK]


@pytest.fixture
def storage(tmp_path):
    storage = BookieStorage(StorageConfig(tmp_path / "data", checkpoint_interval_s=0, entry_log_size=4096))
    try:
        yield storage
    finally:
        storage.close()


def sample(metrics: BookieMetrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_ledger_missing_from_the_store_goes_on_the_second_pass(storage):
    for ledger_id in (1, 2, 3):
        add(storage, ledger_id)
    metrics = BookieMetrics()
    collector = GarbageCollector(storage, ScriptedStore({1, 3}), 60, 0.0, metrics)
    first = collector.run_pass()
    assert first.ledgers_deleted == [] and collector.suspects == {2}
    second = collector.run_pass()
    assert second.outcome == "ok" and second.ledgers_deleted == [2]
    assert storage.ledger_ids() == {1, 3}
    assert second.logs_deleted and second.bytes_reclaimed > 0
    assert sample(metrics, "bookie_gc_passes_total", outcome="ok") == 2
    assert sample(metrics, "bookie_gc_ledgers_collected_total") == 1
    assert sample(metrics, "bookie_gc_entry_logs_deleted_total") == len(second.logs_deleted)
    assert sample(metrics, "bookie_gc_bytes_reclaimed_total") == second.bytes_reclaimed


def test_a_failed_listing_deletes_nothing(storage, caplog):
    add(storage, 1)
    add(storage, 2)
    store = ScriptedStore({1})
    metrics = BookieMetrics()
    collector = GarbageCollector(storage, store, 60, 0.0, metrics)
    collector.run_pass()
    assert collector.suspects == {2}
    store.error = MetadataError("connection loss")
    for _ in range(3):
        assert collector.run_pass().outcome == "listing_failed"
    assert storage.ledger_ids() == {1, 2}
    assert "cannot list the ledgers in scripted:// (connection loss); nothing deleted" in caplog.text
    assert sample(metrics, "bookie_gc_passes_total", outcome="listing_failed") == 3
    store.error = None
    assert collector.run_pass().ledgers_deleted == [2]  # the suspect is confirmed by the next good listing


def test_a_ledger_created_while_the_store_is_listed_is_not_a_suspect(storage):
    add(storage, 1)
    store = ScriptedStore({1})
    store.during_listing = lambda: add(storage, 5)  # created (metadata, then adds) after the listing began
    collector = GarbageCollector(storage, store, 60, 0.0)
    collector.run_pass()
    assert collector.suspects == set()  # 5 was not local when the bookie read its ledgers
    store.listed.add(5)
    store.during_listing = None
    collector.run_pass()
    assert storage.ledger_ids() == {1, 5}


def test_compaction_runs_when_a_threshold_is_set(storage):
    for entry_id in range(0, 40, 4):  # two ledgers interleaved in every log
        for ledger_id in (1, 2):
            ops = [AddOp(ledger_id, e, KEY, CODEC.encode(ledger_id, e, e - 1, 0, b"y" * 300))
                   for e in range(entry_id, entry_id + 4)]
            assert storage.add_entries(ops).result(30) == [pb.OK] * 4
    collector = GarbageCollector(storage, ScriptedStore({1}), 60, 0.6)
    collector.run_pass()
    result = collector.run_pass()
    assert result.ledgers_deleted == [2] and result.logs_compacted and result.entries_copied > 0
    assert all(storage.read_entry(1, e) for e in range(40))


def test_a_failed_storage_stops_the_pass_without_raising(storage, monkeypatch, caplog):
    add(storage, 1)
    collector = GarbageCollector(storage, ScriptedStore(), 60, 0.0)
    collector.run_pass()
    monkeypatch.setattr(storage, "_store_failure", StorageError("journal fsync failed"))
    assert collector.run_pass().outcome == "storage_failed"
    assert "garbage collection pass stopped: no garbage collection: journal fsync failed" in caplog.text
    assert storage.ledger_ids() == {1}


def test_the_thread_collects_periodically_and_stops_when_asked(storage):
    add(storage, 1)
    add(storage, 2)
    store = ScriptedStore({2})
    collector = GarbageCollector(storage, store, 0.05, 0.0)
    collector.start()
    try:
        wait_until(lambda: storage.ledger_ids() == {2}, what="ledger 1 collected")
    finally:
        collector.stop()
    listings = store.listings
    assert listings >= 2
    collector.stop()  # idempotent
    assert store.listings == listings  # no pass after stop() returned


def closed(ledger_id: int, *ensembles: str, state: str = CLOSED) -> LedgerMetadata:
    fragments = tuple(Fragment(5 * index, tuple(bookies.split(","))) for index, bookies in enumerate(ensembles))
    return LedgerMetadata(ledger_id, 3, 3, 2, fragments, state=state, last_entry_id=7 if state == CLOSED else -1)


def test_left_over_copies_of_closed_ledgers_named_elsewhere_go_after_the_wait(storage, caplog):
    for ledger_id in (1, 2, 3, 4):
        add(storage, ledger_id)
    store = ScriptedStore({1, 2, 3, 4})
    store.metadata = {1: closed(1, "x,me,y"), 2: closed(2, "x,y,z", "x,y,w"),  # 2: re-replicated away from "me"
                      3: closed(3, "x,y,z", state=OPEN), 4: closed(4, "x,y,z")}
    caplog.set_level(logging.INFO, logger="bookie_server.gc")
    metrics = BookieMetrics()
    collector = GarbageCollector(storage, store, 60, 0.0, metrics, bookie_id="me", overreplicated_wait_s=0.6)
    assert collector.run_pass().ledgers_deleted == [], "the wait starts"
    time.sleep(0.35)
    op = AddOp(4, 8, KEY, CODEC.encode(4, 8, 7, 0, b"a copy arriving: re-replication copies before its CAS"))
    assert storage.add_entries([op]).result(30) == [pb.OK]
    time.sleep(0.35)
    result = collector.run_pass()
    assert result.overreplicated_deleted == [2] and result.ledgers_deleted == [2]
    assert storage.ledger_ids() == {1, 3, 4}, "named (1), open (3) and written within the wait (4) stay"
    assert "deleted the left-over copies of 1 ledgers [2]" in caplog.text
    assert sample(metrics, "bookie_gc_ledgers_collected_total") == 1

    store.read_error = MetadataError("zookeeper is away")
    time.sleep(0.7)
    assert collector.run_pass().ledgers_deleted == [] and storage.ledger_ids() == {1, 3, 4}
    assert "no over-replicated ledger deleted this pass" in caplog.text
    store.read_error = None
    store.metadata[4] = closed(4, "x,me,z")  # named again (say, re-replicated back here): kept
    assert collector.run_pass().ledgers_deleted == [] and storage.ledger_ids() == {1, 3, 4}
    store.metadata[4] = closed(4, "x,y,z")
    time.sleep(0.1)  # over-replication scans come at most every wait / 8 (0.075 s)
    assert collector.run_pass().ledgers_deleted == [], "unnamed again: the wait starts again"
    assert all(storage.read_entry(4, entry_id) for entry_id in range(9))
    time.sleep(0.7)
    assert collector.run_pass().overreplicated_deleted == [4] and storage.ledger_ids() == {1, 3}


def test_without_the_wait_left_over_copies_stay(storage):
    add(storage, 1)
    store = ScriptedStore({1})
    store.metadata = {1: closed(1, "x,y,z")}
    collector = GarbageCollector(storage, store, 60, 0.0, bookie_id="me")
    for _ in range(3):
        assert collector.run_pass().ledgers_deleted == []
    assert storage.ledger_ids() == {1}


def test_left_over_scans_read_the_metadata_at_most_eight_times_per_wait(storage):
    for ledger_id in (1, 2):
        add(storage, ledger_id)
    store = ScriptedStore({1, 2})
    store.metadata = {1: closed(1, "x,me,y"), 2: closed(2, "x,y,z")}
    collector = GarbageCollector(storage, store, 60, 0.0, bookie_id="me", overreplicated_wait_s=2.4)
    collector.run_pass()
    assert store.reads == 2, "the first pass reads every local ledger's metadata"
    for _ in range(3):
        collector.run_pass()
    assert store.reads == 2 and store.listings == 4, "passes within wait / 8 (0.3 s) list, but read nothing"
    time.sleep(0.35)
    collector.run_pass()
    assert store.reads == 4
    store.read_error = MetadataError("zookeeper is away")
    time.sleep(0.35)
    collector.run_pass()
    store.read_error = None
    collector.run_pass()
    assert store.reads == 4 + 1 + 2, "a failed scan (one failed read) is not a scan: the next pass scans"
    collector.run_pass()
    assert store.reads == 7
