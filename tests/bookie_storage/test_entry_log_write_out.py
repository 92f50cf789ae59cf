"""A checkpoint's paced write-out of the entry logs (``EntryLogger.sync(paced=True)``, ``WRITE_OUT_STEP``): each
log's bytes since its last sync are written out a step at a time before the fsync, once, from a page boundary, never
past what was written; the journal's own syncs (``paced=False``) go straight to the fsync; ``files.write_out`` asks a
real kernel (Linux). Appends through the page cache of bodies the journal only references start the writeback of
each ``WRITEBACK_STEP`` of whole pages as they go (``files.start_writeback``), not waited for, and a refusal fails
the append; bodies the journal holds start none (the checkpoint writes them out, paced)."""
from __future__ import annotations

import ctypes
import errno
import os
import sys

import pytest

from bookie_server import entry_log as entry_log_module
from bookie_server.entry_log import HEADER_SIZE, WRITE_OUT_STEP, WRITEBACK_STEP, EntryLogger
from bookie_server.files import start_writeback, write_out

PAGE = 4096


@pytest.fixture
def asked(monkeypatch):
    calls: list[tuple[int, int, int, int]] = []

    def record(fd: int, start: int, end: int, step: int) -> bool:
        calls.append((fd, start, end, step))
        return write_out(fd, start, end, step)
    monkeypatch.setattr(entry_log_module, "write_out", record)
    return calls


def append(logger: EntryLogger, first: int, count: int, size: int) -> int:
    body = os.urandom(size)
    logger.append_batch([(1, entry_id, body) for entry_id in range(first, first + count)])
    return count * (HEADER_SIZE + size)


def test_a_paced_sync_writes_out_what_the_last_sync_left_and_a_plain_one_does_not(tmp_path, asked):
    logger = EntryLogger(tmp_path, max_log_size=1 << 40, direct_io=False)
    end = append(logger, 0, 300, 10_000)  # about 3 MB
    logger.sync()  # a journal group commit's sync: no write-out
    assert asked == []
    logger.sync(paced=True)  # nothing new since
    assert [(start, stop) for _, start, stop, _ in asked] in ([], [(end & ~(PAGE - 1), end)])
    asked.clear()
    end2 = end + append(logger, 300, 500, 10_000)
    logger.sync(paced=True)
    (fd, start, stop, step), = asked
    assert start == end & ~(PAGE - 1) and stop == end2 and step == WRITE_OUT_STEP  # from the last sync's page on
    logger.close()


def test_each_log_is_written_out_from_its_own_last_sync(tmp_path, asked):
    logger = EntryLogger(tmp_path, max_log_size=2 * WRITE_OUT_STEP, direct_io=False)
    for first in range(0, 12, 2):  # 3 MiB in 512 KiB adds: a second log after 2 MiB
        append(logger, first, 2, WRITE_OUT_STEP // 4 - HEADER_SIZE)
    logger.sync(paced=True)
    assert len({fd for fd, _, _, _ in asked}) == 2
    assert {start for _, start, _, _ in asked} == {0}
    logger.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_the_kernel_is_asked_for_real(tmp_path):
    path = tmp_path / "data"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, os.urandom(3 * WRITE_OUT_STEP + 100))
        assert write_out(fd, 0, 3 * WRITE_OUT_STEP + 100, WRITE_OUT_STEP) is True
    finally:
        os.close(fd)
    with pytest.raises(OSError):  # a closed descriptor: refused as an fsync would be
        write_out(fd, 0, PAGE, WRITE_OUT_STEP)


def test_a_writeback_error_is_raised_not_swallowed_and_the_checkpoint_fails(open_storage, monkeypatch):
    """sync_file_range reports a writeback error to its descriptor once: swallowed, the fsync after it would pass
    and the checkpoint would move the mark past entries that are not on the disk (docs/protocol.md B2)."""
    from bookie_server import files
    from pyspark_ledger.errors import StorageError
    from pyspark_ledger.wire.v1 import bookie_pb2 as pb
    from tests.bookie_storage.entries import add_op

    def failing(fd, offset, nbytes, flags):
        ctypes.set_errno(errno.EIO)
        return -1
    monkeypatch.setattr(files, "_SYNC_RANGE", failing)
    with pytest.raises(OSError) as caught:
        write_out(0, 0, PAGE, WRITE_OUT_STEP)
    assert caught.value.errno == errno.EIO
    storage = open_storage(journal_write_data=False, journal_inline_max_bytes=64 * 1024)
    assert storage.add_entries([add_op(1, entry_id) for entry_id in range(50)]).result(30)
    with pytest.raises(StorageError, match="checkpoint failed"):
        storage.checkpoint()
    assert storage.add_entries([add_op(1, 50)]).result(30) == [pb.IO_ERROR]  # no more adds until a restart


def test_a_checkpoint_writes_the_entry_logs_out_paced(open_storage, asked):
    from tests.bookie_storage.entries import add_op
    storage = open_storage(journal_write_data=False, journal_inline_max_bytes=64 * 1024)  # bodies in the journal too
    assert storage.add_entries([add_op(1, entry_id) for entry_id in range(50)]).result(30)
    assert asked == []  # the group commits of small entries do not write the entry logs out
    storage.checkpoint()
    assert asked and all(step == WRITE_OUT_STEP for _, _, _, step in asked)


@pytest.fixture
def started(monkeypatch):
    calls: list[tuple[int, int, int]] = []

    def record(fd: int, start: int, end: int) -> None:
        calls.append((fd, start, end))
        start_writeback(fd, start, end)
    monkeypatch.setattr(entry_log_module, "start_writeback", record)
    return calls


def test_appends_start_the_writeback_of_their_whole_pages_a_step_at_a_time(tmp_path, started):
    logger = EntryLogger(tmp_path, max_log_size=5 * WRITEBACK_STEP, direct_io=False)
    ends: dict[int, int] = {}
    first = 0
    for size in [100, 3000, 70_000, 1 << 20, 5, 300_000] * 8:  # about 11 MiB: a second and a third log
        locations = logger.append_batch([(1, entry_id, os.urandom(size)) for entry_id in range(first, first + 3)],
                                        writeback=True)
        first += 3
        log_id, offset, length = locations[-1]
        ends[log_id] = offset + HEADER_SIZE + length
    assert len(ends) >= 3
    by_fd: dict[int, list[tuple[int, int]]] = {}
    for fd, start, end in started:
        by_fd.setdefault(fd, []).append((start, end))
    fds = {log_id: logger._fds[log_id] for log_id in ends}
    assert set(by_fd) <= set(fds.values()) and len(by_fd) >= len(ends) - 1  # each log through its own descriptor
    for log_id, log_end in ends.items():
        ranges, at = by_fd.get(fds[log_id], []), 0
        for start, end in ranges:  # from the log's start, each range where the last one ended, whole pages
            assert start == at and end % PAGE == 0 and end - start >= WRITEBACK_STEP and end <= log_end
            at = end
        assert log_end - at < WRITEBACK_STEP + PAGE  # the rest waits for the next step or the sync
    logger.sync()
    logger.close()


def test_direct_writes_and_bodies_no_sync_waits_for_start_no_writeback(tmp_path, started):
    (tmp_path / "direct").mkdir()
    (tmp_path / "cache").mkdir()
    logger = EntryLogger(tmp_path / "direct", max_log_size=1 << 40, direct_io=True)
    for first in range(0, 40, 4):
        logger.append_batch([(1, entry_id, os.urandom(100_000)) for entry_id in range(first, first + 4)],
                            writeback=True)
    logger.sync()
    logger.close()
    logger = EntryLogger(tmp_path / "cache", max_log_size=1 << 40, direct_io=False)
    append(logger, 0, 40, 100_000)  # writeback=False: bodies the journal holds
    assert started == []
    append(logger, 40, 1, 100)
    logger.append_batch([(1, 41, b"x" * 100)], writeback=True)  # the next referenced body starts it all
    assert [(start, end) for _, start, end in started] == [(0, (40 * (HEADER_SIZE + 100_000)) & ~(PAGE - 1))]
    logger.close()


def test_a_storage_starts_writeback_for_referenced_bodies_only(open_storage, started):
    from bookie_server.storage import AddOp
    from tests.bookie_storage.entries import CODEC, KEY

    def adds(first: int, count: int, size: int) -> list[AddOp]:
        return [AddOp(1, entry_id, KEY, CODEC.encode(1, entry_id, entry_id - 1, 0, os.urandom(size)), False)
                for entry_id in range(first, first + count)]
    storage = open_storage(journal_write_data=False, journal_inline_max_bytes=64 * 1024, entry_log_direct_io=False)
    for first in range(0, 600, 50):  # 600 bodies of 4 KiB, each in the journal too: about 2.4 MiB
        assert storage.add_entries(adds(first, 50, 4096)).result(30)
    assert started == []
    for first in range(600, 610, 2):  # 10 of 512 KiB, only referenced: 5 MiB
        assert storage.add_entries(adds(first, 2, 512 * 1024)).result(30)
    assert len(started) >= 4 and started[0][1] == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_writeback_is_started_for_real_and_a_refusal_fails_the_append(tmp_path, monkeypatch):
    from bookie_server import files

    path = tmp_path / "data"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, os.urandom(3 * WRITEBACK_STEP))
        assert start_writeback(fd, 0, 3 * WRITEBACK_STEP) is None
        os.fsync(fd)
    finally:
        os.close(fd)
    with pytest.raises(OSError):  # a closed descriptor: refused
        start_writeback(fd, 0, PAGE)

    def failing(fd, offset, nbytes, flags):
        ctypes.set_errno(errno.EIO)
        return -1
    monkeypatch.setattr(files, "_SYNC_RANGE", failing)
    (tmp_path / "logs").mkdir()
    logger = EntryLogger(tmp_path / "logs", max_log_size=1 << 40, direct_io=False)
    try:
        append(logger, 0, 1, 1000)  # less than a step: no writeback started yet
        with pytest.raises(OSError) as caught:  # the storage turns read-only on it, as on a failed write
            logger.append_batch([(1, 1, os.urandom(WRITEBACK_STEP))], writeback=True)
        assert caught.value.errno == errno.EIO
    finally:
        monkeypatch.undo()
        logger.close()
