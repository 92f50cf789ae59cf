"""The journal's zeros written ahead by a thread of their own (``bookie_server/journal_space.py``, docs/protocol.md
B7): never over a record, never on the commit path while the filler keeps up, a failed fdatasync of theirs stops
the journal, and a stop waits for a step in flight."""
from __future__ import annotations

import errno
import os
import random
import threading
import time

import pytest

from bookie_server import journal as journal_module
from bookie_server.journal_space import JournalSpace
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import add_op

KIB, MIB = 1024, 1024 * 1024


def new_file(tmp_path, size: int = 16):
    path = tmp_path / "journal.txn"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"H" * size)
    return path, fd


def slow_sync(fd: int) -> None:  # a step stays in flight long enough for commits to meet it
    time.sleep(0.002)
    os.fdatasync(fd)


@pytest.mark.parametrize("slow_filler_writes", [False, True])
def test_zeros_never_cover_a_record_whoever_writes_them(tmp_path, monkeypatch, slow_filler_writes):
    if slow_filler_writes:  # a step's zeros still being written when a commit passes them
        pwrite = os.pwrite

        def slow_pwrite(fd: int, data, offset: int) -> int:
            if threading.current_thread().name == "bookie-journal-zeros":
                time.sleep(0.002)
            return pwrite(fd, data, offset)
        monkeypatch.setattr(os, "pwrite", slow_pwrite)
    path, fd = new_file(tmp_path)
    space = JournalSpace(path, 16, 64 * KIB, sync=slow_sync)
    rng = random.Random(7)
    offset, records = 16, []
    try:
        for index in range(400):
            size = rng.choice((100, 3 * KIB, 40 * KIB, 150 * KIB))  # some past the zeros: the commit path writes them
            space.claim(offset, offset + size, fd)
            data = bytes([1 + index % 255]) * size
            assert os.pwrite(fd, data, offset) == size
            records.append((offset, data))
            offset += size
            if index % 25 == 0:
                time.sleep(0.003)  # let the filler run ahead now and then
    finally:
        allocated = space.stop()
    assert allocated >= offset
    for start, data in records:
        assert os.pread(fd, len(data), start) == data, f"the record at {start} was overwritten"
    assert not os.pread(fd, allocated - offset, offset).strip(b"\0")  # zeros only past the records
    assert space.inline_bytes > 0  # the 150 KiB records outran the 64 KiB ahead: both writers were exercised
    os.close(fd)


def test_a_commit_within_the_zeros_writes_none(open_storage):
    storage = open_storage(journal_preallocate_bytes=MIB)
    storage.add_entries([add_op(1, 0)]).result(30)  # the first commit may meet the filler's first step
    space = storage._journal._space
    assert space.settled(30)
    before = space.inline_bytes
    for entry_id in range(1, 201):  # about 200 KiB of records: within the MiB of zeros ahead
        assert storage.add_entries([add_op(1, entry_id)]).result(30) == [pb.OK]
    assert space.inline_bytes == before  # no commit wrote a zero
    assert space.settled(30)
    assert space.allocated >= storage._journal.mark().offset + MIB  # and the zeros are ahead again


def test_without_the_filler_the_commits_write_the_zeros(open_storage, monkeypatch):
    """The test above can fail: with the zeros left to the commit path, its commits write them."""
    monkeypatch.setattr(journal_module, "JournalSpace",
                        lambda path, size, ahead: JournalSpace(path, size, ahead, background=False))
    storage = open_storage(journal_preallocate_bytes=MIB)
    for entry_id in range(201):
        assert storage.add_entries([add_op(1, entry_id)]).result(30) == [pb.OK]
    assert storage._journal._space.inline_bytes >= MIB


def test_a_failed_fdatasync_of_the_zeros_stops_the_journal(open_storage, monkeypatch):
    failed = threading.Event()

    def failing_sync(fd: int) -> None:
        failed.set()
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(journal_module, "JournalSpace",
                        lambda path, size, ahead: JournalSpace(path, size, ahead, sync=failing_sync))
    storage = open_storage(journal_preallocate_bytes=2 * MIB)
    assert storage.add_entries([add_op(1, 0)]).result(30) == [pb.OK]  # its commit writes a step, the filler the next
    assert failed.wait(30)
    assert storage._journal._space.settled(30)  # the filler gave up
    assert storage.add_entries([add_op(1, 1)]).result(30) == [pb.IO_ERROR]
    assert storage._journal.failure is not None
    assert "Input/output error" in str(storage._journal.failure)


def test_stop_waits_for_a_step_in_flight_and_says_where_the_zeros_end(tmp_path):
    path, fd = new_file(tmp_path)
    in_sync = threading.Event()
    release = threading.Event()

    def held_sync(descriptor: int) -> None:
        in_sync.set()
        release.wait(30)
        os.fdatasync(descriptor)
    space = JournalSpace(path, 16, 2 * MIB, sync=held_sync)
    time.sleep(0.1)
    assert not in_sync.is_set() and os.fstat(fd).st_size == 16  # no record claimed yet: no zeros
    space.claim(16, 100, fd)  # the first commit writes one step (1 MiB) past its records, the filler the next
    assert in_sync.wait(30)
    stopped: list[int] = []
    stopper = threading.Thread(target=lambda: stopped.append(space.stop()))
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive()  # waits for the step
    release.set()
    stopper.join(30)
    assert stopped == [100 + 2 * MIB] == [os.fstat(fd).st_size]
    os.close(fd)


@pytest.mark.parametrize("background", [True, False])
def test_no_preallocation_means_no_zeros_and_no_thread(tmp_path, background):
    path, fd = new_file(tmp_path)
    space = JournalSpace(path, 16, 0, background=background)
    space.claim(16, 1000, fd)
    assert space.stop() == 16 and os.fstat(fd).st_size == 16
    assert not [thread for thread in threading.enumerate() if thread.name == "bookie-journal-zeros"]
    os.close(fd)
