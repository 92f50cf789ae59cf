"""The journal: group commit, rotation, removal after checkpoints, and what a failed fsync does."""
from __future__ import annotations

import os
import threading
import time

from bookie_server.journal import journal_files
from bookie_server.journal_format import encode_commit, encode_file_header
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import KEY, add_op, body


class SyncLog:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, float]] = []
        self._lock = threading.Lock()

    def __call__(self, records: int, nbytes: int, fsync_seconds: float) -> None:
        with self._lock:
            self.calls.append((records, nbytes, fsync_seconds))


def test_group_commit_uses_fewer_fsyncs_than_adds(open_storage):
    syncs = SyncLog()
    storage = open_storage(on_journal_sync=syncs, journal_max_wait_ms=5)
    threads, per_thread = 8, 100
    results: dict[int, list] = {}

    def writer(ledger_id: int) -> None:
        futures = [storage.add_entries([add_op(ledger_id, entry_id)]) for entry_id in range(per_thread)]
        results[ledger_id] = [future.result(timeout=60) for future in futures]

    workers = [threading.Thread(target=writer, args=(ledger_id,)) for ledger_id in range(1, threads + 1)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    adds = threads * per_thread
    assert all(statuses == [[pb.OK]] * per_thread for statuses in results.values()) and len(results) == threads
    storage.close()  # the journal thread is joined: every sync was reported
    # every add record plus one ledger-key record per new ledger went through exactly one fsync
    assert sum(records for records, _, _ in syncs.calls) == adds + threads
    assert len(syncs.calls) < adds
    assert all(nbytes > 0 and seconds >= 0 for _, nbytes, seconds in syncs.calls)


def test_group_commit_respects_the_batch_record_limit(open_storage):
    syncs = SyncLog()
    storage = open_storage(on_journal_sync=syncs, journal_max_batch_records=3, journal_max_wait_ms=50)
    futures = [storage.add_entries([add_op(1, entry_id)]) for entry_id in range(30)]
    assert [future.result(timeout=60) for future in futures] == [[pb.OK]] * 30
    storage.close()
    assert all(records <= 3 for records, _, _ in syncs.calls)
    assert sum(records for records, _, _ in syncs.calls) == 31


def test_journal_rotates_and_checkpoint_removes_old_files(open_storage, data_dir):
    storage = open_storage(journal_file_size=1024)  # a batch of 10 references is 570 bytes
    for first in range(0, 200, 10):
        assert storage.add_entries([add_op(1, e) for e in range(first, first + 10)]).result(30) == [pb.OK] * 10
    before = [file_id for file_id, _ in journal_files(data_dir / "journal")]
    assert len(before) >= 5
    storage.checkpoint()
    after = [file_id for file_id, _ in journal_files(data_dir / "journal")]
    assert after == [before[-1]]  # only the file holding the mark is left
    assert storage.read_entry(1, 3) == body(1, 3)
    storage.close()
    reopened = open_storage()
    assert [reopened.read_entry(1, e) for e in range(200)] == [body(1, e) for e in range(200)]


def test_failed_fsync_fails_waiting_adds_and_later_ones(open_storage, data_dir, monkeypatch):
    storage = open_storage()
    assert storage.add_entries([add_op(1, 0)]).result(30) == [pb.OK]

    def broken_fdatasync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken_fdatasync)
    assert storage.add_entries([add_op(1, 1), add_op(1, 2)]).result(30) == [pb.IO_ERROR] * 2
    assert "journal" in str(storage.failure)
    assert storage.add_entries([add_op(1, 3), add_op(1, 4, b"")]).result(30) == [pb.IO_ERROR, pb.BAD_REQUEST]
    assert storage.fence(1, KEY).result(30) == pb.IO_ERROR
    assert storage.read_entry(1, 0) == body(1, 0)  # reads keep working
    storage.close()
    monkeypatch.undo()
    reopened = open_storage()
    assert reopened.failure is None
    assert reopened.read_entry(1, 0) == body(1, 0)
    assert reopened.add_entries([add_op(1, 5)]).result(30) == [pb.OK]


def test_flush_waits_for_everything_submitted_before_it(tmp_path):
    from bookie_server.journal import Journal
    from bookie_server.journal_format import encode_fence
    from bookie_server.storage import StorageConfig

    config = StorageConfig(tmp_path, journal_max_wait_ms=0)
    config.journal_dir.mkdir(parents=True)
    gate, held = threading.Event(), threading.Event()

    def before_write() -> None:  # holds the journal thread before its first batch
        held.set()
        gate.wait(30)

    journal = Journal(config, 1, before_write=before_write)
    try:
        record = encode_fence(7, KEY)
        done = []
        assert journal.submit([record], len(record), 1, done.append)
        assert held.wait(30)
        assert journal.submitted == 1 and journal.durable_position()[1] == 0
        flushed = []
        flusher = threading.Thread(target=lambda: flushed.append(journal.flush(30)))
        flusher.start()
        deadline = time.monotonic() + 30
        while journal.submitted < 2:  # the flush's own (empty) submission is queued behind the held batch
            assert flusher.is_alive() and time.monotonic() < deadline
            time.sleep(0.005)
        assert flushed == [] and done == []
        gate.set()
        flusher.join(30)
        assert flushed == [True] and done == [True]
        mark, durable = journal.durable_position()
        assert durable == 2 and mark.offset == len(encode_file_header()) + len(record) + len(encode_commit(1, 0))
    finally:
        gate.set()
        journal.close()
    assert journal.flush(1) is False  # a closed journal flushes nothing


def test_a_flush_can_close_a_big_enough_file_so_the_next_checkpoint_deletes_it(open_storage, data_dir):
    storage = open_storage()  # the default 512 MiB journal files
    for first in range(0, 40, 10):
        assert storage.add_entries([add_op(1, e) for e in range(first, first + 10)]).result(30) == [pb.OK] * 10
    journal = storage._journal
    size = journal.mark().offset  # the records' end (the file itself is longer: preallocated zeros)
    assert journal_files(data_dir / "journal")[-1][1].stat().st_size > size
    assert journal.flush(30, new_file_at=size + 1)  # not big enough: the same file
    assert len(journal_files(data_dir / "journal")) == 1
    assert journal.flush(30, new_file_at=size)
    assert [file_id for file_id, _ in journal_files(data_dir / "journal")] == [1, 2]
    assert journal.mark().file_id == 2
    storage.checkpoint()
    assert [file_id for file_id, _ in journal_files(data_dir / "journal")] == [2]
    storage.close()
    reopened = open_storage()
    for entry_id in range(40):
        assert reopened.read_entry(1, entry_id) == body(1, entry_id)
