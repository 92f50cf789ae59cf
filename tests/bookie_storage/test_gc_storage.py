"""Garbage collection in the storage engine: deleting ledgers, deleting entry logs, compacting them.

Every test runs with both journal modes (references and bodies)."""
from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from pathlib import Path

import pytest

from bookie_server import journal
from bookie_server.entry_log import LOG_SUFFIX
from bookie_server.entry_log_usage import EntryLogScan
from bookie_server.files import numbered_files
from pyspark_ledger.errors import NoSuchEntryError, NoSuchLedgerError, StorageError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import KEY, add_op, body
from tests.bookie_storage.helpers import flip_byte

pytestmark = pytest.mark.usefixtures("journal_mode")

LOG_SIZE = 16 * 1024  # a few entries per log, so ledgers span several logs


def write(storage, ledger_ids, entries: range, batch: int = 5, interleave: bool = False) -> None:
    batches = [(ledger_id, range(first, min(first + batch, entries.stop)))
               for ledger_id in ledger_ids for first in range(entries.start, entries.stop, batch)]
    if interleave:
        batches.sort(key=lambda item: (item[1].start, list(ledger_ids).index(item[0])))
    for ledger_id, ids in batches:
        assert storage.add_entries([add_op(ledger_id, e) for e in ids]).result(30) == [pb.OK] * len(ids)


def log_files(data_dir: Path) -> dict[int, Path]:
    return dict(numbered_files(data_dir / "entry_logs", LOG_SUFFIX))


def ledgers_in_log(path: Path) -> set[int]:
    return {record.ledger_id for record in EntryLogScan(path).records()}


def index_files(data_dir: Path) -> set[str]:
    return {path.name for path in (data_dir / "index").rglob("*.idx")}


def assert_readable(storage, ledger_ids, entries: range) -> None:
    for ledger_id in ledger_ids:
        for entry_id in entries:
            assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id), (ledger_id, entry_id)


def assert_deleted(storage, ledger_id: int) -> None:
    with pytest.raises(NoSuchLedgerError):
        storage.read_entry(ledger_id, 0)
    assert storage.ledger(ledger_id) is None
    assert storage.check_master_key(ledger_id, KEY) == pb.NO_SUCH_LEDGER


def test_deleted_ledgers_answer_no_such_ledger_and_others_stay_intact(open_storage):
    storage = open_storage(entry_log_size=LOG_SIZE)
    write(storage, [1, 2, 3], range(30))
    assert storage.ledger_ids() == {1, 2, 3}
    assert storage.delete_ledgers([2, 99]) == [2]  # 99 was never here
    assert_deleted(storage, 2)
    assert storage.ledger_ids() == {1, 3}
    assert_readable(storage, [1, 3], range(30))
    assert storage.delete_ledgers([2]) == []


def test_entry_logs_go_once_every_ledger_in_them_is_gone(open_storage, data_dir):
    storage = open_storage(entry_log_size=LOG_SIZE)
    write(storage, [1, 2, 3], range(40))
    before = {log_id: ledgers_in_log(path) for log_id, path in log_files(data_dir).items()}
    newest = max(before)
    assert any(ledgers == {2} for ledgers in before.values()) and any(len(ls) > 1 for ls in before.values())

    assert storage.delete_ledgers([2]) == [2]
    outcome = storage.reclaim_entry_logs()
    only_2 = sorted(log_id for log_id, ledgers in before.items() if ledgers == {2} and log_id != newest)
    assert outcome.logs_deleted == only_2
    assert outcome.bytes_reclaimed > 0
    assert set(log_files(data_dir)) == set(before) - set(only_2)
    assert index_files(data_dir) == {f"{1:016x}.idx", f"{3:016x}.idx"}
    assert_readable(storage, [1, 3], range(40))

    assert storage.delete_ledgers([1, 3]) == [1, 3]
    storage.reclaim_entry_logs()
    assert set(log_files(data_dir)) == {newest}  # the newest log is kept: log ids are never reused
    assert index_files(data_dir) == set()
    assert storage.reclaim_entry_logs().logs_deleted == []


def test_the_index_file_goes_only_with_the_checkpoint_that_made_the_deletion_durable(open_storage, data_dir):
    storage = open_storage()
    write(storage, [1, 2], range(10))
    storage.checkpoint()
    assert index_files(data_dir) == {f"{1:016x}.idx", f"{2:016x}.idx"}
    storage.delete_ledgers([2])
    assert f"{2:016x}.idx" in index_files(data_dir)  # a crash now brings ledger 2 back whole
    storage.checkpoint()
    assert index_files(data_dir) == {f"{1:016x}.idx"}


def test_deletions_survive_a_restart(open_storage, data_dir):
    storage = open_storage(entry_log_size=LOG_SIZE)
    write(storage, [1, 2, 3], range(30))
    storage.delete_ledgers([1, 3])
    storage.reclaim_entry_logs()
    storage.close()
    reopened = open_storage(entry_log_size=LOG_SIZE)
    assert reopened.ledger_ids() == {2}
    assert_deleted(reopened, 1)
    assert_deleted(reopened, 3)
    assert_readable(reopened, [2], range(30))


def test_a_deletion_not_yet_checkpointed_is_undone_by_a_restart_without_checkpoint(open_storage, data_dir):
    """Closing checkpoints; to see a crash, copy the directory while the storage is open (no later writes)."""
    storage = open_storage()
    write(storage, [1, 2], range(10))
    storage.checkpoint()
    storage.delete_ledgers([2])
    crashed = data_dir.parent / "crashed"
    _copy_tree(data_dir, crashed)
    (crashed / "storage.lock").unlink()
    reopened = open_storage(crashed)
    assert reopened.ledger_ids() == {1, 2}  # back whole: snapshot, index file and journal agree
    assert_readable(reopened, [1, 2], range(10))


def test_a_zombie_writer_creates_the_ledger_again_from_nothing(open_storage, data_dir):
    storage = open_storage()
    write(storage, [1, 2], range(10))
    storage.checkpoint()
    storage.delete_ledgers([2])
    assert storage.add_entries([add_op(2, 10)]).result(30) == [pb.OK]  # a writer that did not hear of it
    assert storage.read_entry(2, 10) == body(2, 10)
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(2, 3)  # the old entries are gone: the stale index file is not read
    assert storage.ledger(2).last_entry_id == 10
    storage.reclaim_entry_logs()
    assert f"{2:016x}.idx" in index_files(data_dir)  # alive again: its new index file replaced the old one
    storage.close()
    reopened = open_storage()
    assert reopened.read_entry(2, 10) == body(2, 10)
    with pytest.raises(NoSuchEntryError):
        reopened.read_entry(2, 3)
    assert reopened.delete_ledgers([2]) == [2]  # and it is collected like any other
    reopened.reclaim_entry_logs()
    assert index_files(data_dir) == {f"{1:016x}.idx"}


def test_a_ledger_created_by_a_fence_can_be_collected(open_storage):
    storage = open_storage()
    assert storage.fence(7, KEY).result(30) == pb.OK
    assert storage.delete_ledgers([7]) == [7]
    storage.reclaim_entry_logs()
    assert storage.ledger(7) is None
    assert storage.fence(7, KEY).result(30) == pb.OK  # fenced again: created again, fenced (docs/protocol.md F4)
    assert storage.ledger(7).fenced


def test_compaction_moves_live_entries_and_deletes_the_sparse_logs(open_storage, data_dir):
    storage = open_storage(entry_log_size=LOG_SIZE)
    write(storage, [1, 2, 3, 4, 5], range(40), batch=2, interleave=True)
    before = {log_id: ledgers_in_log(path) for log_id, path in log_files(data_dir).items()}
    sparse = {log_id for log_id, ledgers in before.items() if 1 in ledgers and log_id != max(before)}
    assert len(sparse) >= 3
    live_records = sum(1 for log_id in sparse for record in EntryLogScan(log_files(data_dir)[log_id]).records()
                       if record.ledger_id == 1)
    assert storage.delete_ledgers([2, 3, 4, 5]) == [2, 3, 4, 5]
    assert not sparse & set(storage.reclaim_entry_logs().logs_deleted)  # ledger 1 keeps them
    outcome = storage.compact_entry_logs(0.5)
    assert set(outcome.logs_compacted) == set(outcome.logs_deleted) == sparse
    assert outcome.entries_copied == live_records
    after = log_files(data_dir)
    assert not sparse & set(after) and max(after) > max(before)  # the copies went to new logs
    assert_readable(storage, [1], range(40))
    storage.close()
    reopened = open_storage(entry_log_size=LOG_SIZE)
    assert_readable(reopened, [1], range(40))
    assert {log_id for log_id, path in log_files(data_dir).items() if ledgers_in_log(path) - {1}} <= {max(before)}


def test_compaction_copies_only_the_copy_the_index_points_to(open_storage, data_dir):
    storage = open_storage(entry_log_size=LOG_SIZE)
    write(storage, [1, 2], range(20), batch=2, interleave=True)
    write(storage, [1], range(0, 6), batch=2)  # re-added (as recovery writes back): the index points here now
    write(storage, [3], range(40))  # more logs, so the first ones are sealed
    newest_copy = {}  # (ledger, entry) -> (log id, offset) of the last copy written: the one indexed
    for log_id, path in log_files(data_dir).items():
        for record in EntryLogScan(path).records():
            newest_copy[(record.ledger_id, record.entry_id)] = (log_id, record.offset)
    storage.delete_ledgers([2])
    outcome = storage.compact_entry_logs(0.9)
    assert outcome.logs_compacted
    expected = sum(1 for (ledger_id, _), (log_id, _) in newest_copy.items()
                   if ledger_id != 2 and log_id in outcome.logs_compacted)
    assert outcome.entries_copied == expected
    assert_readable(storage, [1], range(20))
    assert_readable(storage, [3], range(40))


def test_a_damaged_log_is_kept_by_compaction_and_by_reclaim(open_storage, data_dir, caplog):
    storage = open_storage(entry_log_size=LOG_SIZE)
    write(storage, [1, 2], range(20), batch=2, interleave=True)
    write(storage, [3], range(20))
    first = min(log_files(data_dir))
    records = list(EntryLogScan(log_files(data_dir)[first]).records())
    flip_byte(log_files(data_dir)[first], records[1].offset + 40)  # a body in the middle: valid records follow
    storage.delete_ledgers([2])
    outcome = storage.compact_entry_logs(0.9)
    assert first not in outcome.logs_deleted and first in log_files(data_dir)
    assert f"compaction: entry log {log_files(data_dir)[first]} has a damaged record" in caplog.text
    storage.delete_ledgers([1, 3])
    storage.reclaim_entry_logs()
    assert first in log_files(data_dir)  # its ledger map cannot be trusted: kept until repaired


def test_gc_refuses_to_work_on_a_failed_storage(open_storage, monkeypatch):
    storage = open_storage()
    write(storage, [1], range(5))
    monkeypatch.setattr(storage, "_store_failure", StorageError("disk gone"))
    with pytest.raises(StorageError, match="no garbage collection: disk gone"):
        storage.delete_ledgers([1])
    with pytest.raises(StorageError, match="no garbage collection"):
        storage.reclaim_entry_logs()
    assert storage.ledger_ids() == {1}


def _copy_tree(source: Path, target: Path) -> None:
    import shutil
    shutil.copytree(source, target)


class StalledJournal:
    """The os module as the journal sees it, with fdatasync held at a gate while ``stalled`` is set."""

    def __init__(self) -> None:
        self.stalled = threading.Event()
        self.gate = threading.Event()

    def __getattr__(self, name):
        return getattr(os, name)

    def fdatasync(self, fd) -> None:
        if self.stalled.is_set():
            self.gate.wait(60)
        os.fdatasync(fd)


def add_from_threads(storage, batches: list[list]) -> list[concurrent.futures.Future]:
    """Add each batch from a thread of its own, in order, each once the previous one is in the journal's queue; the
    futures of their statuses. (An adding thread may lead the journal's commit, docs/protocol.md B1, and then
    stall with it, as the journal thread would.)"""
    pool = concurrent.futures.ThreadPoolExecutor(len(batches))
    futures = []
    for adds in batches:
        submitted = storage._journal.submitted
        futures.append(pool.submit(lambda adds=adds: storage.add_entries(adds).result(60)))
        deadline = time.monotonic() + 30
        while storage._journal.submitted == submitted:
            assert time.monotonic() < deadline, "an add never reached the journal"
            time.sleep(0.001)
    pool.shutdown(wait=False)
    return futures


def test_compaction_waits_for_journal_records_naming_the_old_log(open_storage, data_dir, monkeypatch):
    """Records still queued in the journal may name the log being compacted: the old log may go only once a
    mark past them is durable, or replay would find them naming a missing log (reference mode)."""
    storage = open_storage(entry_log_size=LOG_SIZE, journal_max_wait_ms=0)
    write(storage, [2], range(12))  # most of the first log
    spy = StalledJournal()
    monkeypatch.setattr(journal, "os", spy)
    spy.stalled.set()
    pending = add_from_threads(storage, [[add_op(1, entry_id)] for entry_id in range(2)]  # into the same log
                               + [[add_op(3, e) for e in range(f, f + 5)] for f in range(0, 40, 5)])
    sparse = min(log_files(data_dir))
    assert {1, 2} <= ledgers_in_log(log_files(data_dir)[sparse]) and len(log_files(data_dir)) > 2
    storage.delete_ledgers([2])
    submitted = storage._journal.submitted
    compaction = threading.Thread(target=lambda: outcome.append(storage.compact_entry_logs(0.5)))
    outcome: list = []
    compaction.start()
    deadline = time.monotonic() + 30
    while compaction.is_alive() and storage._journal.submitted == submitted:  # finished, or waiting on a flush
        assert time.monotonic() < deadline, "compaction neither finished nor flushed the journal"
        time.sleep(0.01)
    spy.stalled.clear()
    spy.gate.set()
    compaction.join(60)
    assert [future.result(30) for future in pending] and sparse in outcome[0].logs_compacted
    crashed = data_dir.parent / "crashed"  # the directory as a kill -9 would leave it now
    _copy_tree(data_dir, crashed)
    (crashed / "storage.lock").unlink()
    reopened = open_storage(crashed, entry_log_size=LOG_SIZE)
    assert_readable(reopened, [1], range(2))
    assert_readable(reopened, [3], range(40))


# --- sealing the current log early ----------------------------------------------------------------------------

BIG_LOG = 1024 * 1024 * 1024  # the default: these logs never fill by themselves


def data_bytes(data_dir: Path) -> int:
    return sum(path.stat().st_size for path in log_files(data_dir).values())


def test_a_mostly_dead_current_log_is_sealed_early_and_collected(open_storage, data_dir):
    storage = open_storage(entry_log_size=BIG_LOG)
    write(storage, [1, 2, 3], range(60))
    write(storage, [4], range(8))  # a little of a live ledger
    (only,) = log_files(data_dir)
    storage.checkpoint()  # every record in the file (a direct-written log stages its newest, docs/protocol.md B9)
    before = data_bytes(data_dir)
    storage.delete_ledgers([1, 2, 3])
    assert storage.reclaim_entry_logs().logs_deleted == []  # the current log is never deleted...
    assert storage.rotate_entry_log(0.2, min_bytes=before // 2) == only  # ...but sealed early
    assert sorted(log_files(data_dir)) == [only, only + 1]
    outcome = storage.reclaim_entry_logs()
    compacted = storage.compact_entry_logs(0.2)
    assert outcome.logs_deleted == [] and compacted.logs_compacted == [only]  # ledger 4 is copied out
    assert data_bytes(data_dir) < before // 10
    assert_readable(storage, [4], range(8))
    write(storage, [4], range(8, 12))  # the new current log takes adds
    storage.close()
    reopened = open_storage(entry_log_size=BIG_LOG)
    assert_readable(reopened, [4], range(12))
    assert sorted(log_files(data_dir)) == [only + 1]


def test_a_wholly_dead_current_log_is_deleted_by_the_same_pass(open_storage, data_dir):
    storage = open_storage(entry_log_size=BIG_LOG)
    write(storage, [1, 2], range(40))
    (only,) = log_files(data_dir)
    storage.delete_ledgers([1, 2])
    assert storage.rotate_entry_log(0.0, min_bytes=1) == only  # compaction off: wholly dead is enough
    assert storage.reclaim_entry_logs().logs_deleted == [only]
    assert data_bytes(data_dir) == 0 and sorted(log_files(data_dir)) == [only + 1]  # the empty newest log
    assert storage.rotate_entry_log(0.0, min_bytes=1) is None  # nothing in it: never sealed again
    write(storage, [5], range(10))
    assert_readable(storage, [5], range(10))


def test_the_current_log_stays_when_small_or_live_enough(open_storage, data_dir):
    storage = open_storage(entry_log_size=BIG_LOG)
    assert storage.rotate_entry_log(0.2, min_bytes=1) is None  # no log yet
    write(storage, [1, 2], range(40))
    storage.checkpoint()  # every record in the file (a direct-written log stages its newest, docs/protocol.md B9)
    size = data_bytes(data_dir)
    assert storage.rotate_entry_log(0.2, min_bytes=1) is None  # all live
    storage.delete_ledgers([1])
    assert storage.rotate_entry_log(0.2, min_bytes=1) is None  # about half live: compaction would not take it
    storage.delete_ledgers([2])
    assert storage.rotate_entry_log(0.2, min_bytes=size * 2) is None  # dead, but below the minimum
    assert storage.rotate_entry_log(0.2) is None  # the default minimum, 16 MiB
    assert len(log_files(data_dir)) == 1
