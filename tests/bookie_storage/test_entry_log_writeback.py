"""Background writeback of entry logs (``bookie_server.writeback``): started every ``writeback_step`` appended
bytes, on its own thread, never in place of the fsync that makes entries durable."""
from __future__ import annotations

import os
import threading
import time

import pytest

from bookie_server import entry_log as entry_log_module
from bookie_server import writeback
from bookie_server.entry_log import HEADER_SIZE, EntryLogger

KiB = 1024

pytestmark = pytest.mark.skipif(writeback._sync_file_range is None, reason="no sync_file_range here")


class Recorder:
    """Records the writebacks started (and still starts them)."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple[int, int, int]] = []
        self.done = threading.Event()
        real = writeback.start_writeback

        def spy(fd: int, start: int, end: int) -> bool:
            self.calls.append((fd, start, end))
            self.done.set()
            return real(fd, start, end)
        monkeypatch.setattr(writeback, "start_writeback", spy)


def writeback_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "entry-log-writeback"]


def test_writeback_starts_every_step_of_appended_bytes_and_stops_with_the_logger(tmp_path, monkeypatch):
    recorder = Recorder(monkeypatch)
    before = len(writeback_threads())
    logger = EntryLogger(tmp_path, max_log_size=1 << 40, writeback_step=64 * KiB)
    try:
        body = os.urandom(20 * KiB)
        logger.append_batch([(1, 0, body), (1, 1, body)])  # 40 KiB: under the step
        assert recorder.calls == [] and len(writeback_threads()) == before  # no thread before the first step
        logger.append_batch([(1, 2, body), (1, 3, body)])  # 80 KiB in all: one step
        assert recorder.done.wait(10)
        fd, start, end = recorder.calls[0]
        assert (start, end) == (0, 4 * (HEADER_SIZE + len(body)))
        recorder.done.clear()
        logger.append_batch([(1, entry_id, body) for entry_id in range(4, 8)])
        assert recorder.done.wait(10)
        assert recorder.calls[-1][1:] == (end, 8 * (HEADER_SIZE + len(body)))  # only what came since
    finally:
        logger.close()
    assert len(writeback_threads()) == before


def test_a_written_back_log_is_still_fsynced_by_the_next_sync(tmp_path, monkeypatch):
    """Durability comes only from fsync: starting a writeback must not count as one."""
    recorder = Recorder(monkeypatch)
    logger = EntryLogger(tmp_path, max_log_size=1 << 40, writeback_step=16 * KiB)
    synced: list[int] = []
    real_fsync = os.fsync
    try:
        location = logger.append_batch([(7, 0, os.urandom(32 * KiB))])[0]
        assert recorder.done.wait(10)
        deadline = time.monotonic() + 10
        while logger._writeback.started == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        monkeypatch.setattr(entry_log_module.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
        logger.sync()
        assert recorder.calls[0][0] in synced  # (and the directory, the log being new)
        assert logger.read(location, 7, 0)
    finally:
        logger.close()


def test_no_writeback_with_a_step_of_zero(tmp_path, monkeypatch):
    recorder = Recorder(monkeypatch)
    logger = EntryLogger(tmp_path, max_log_size=1 << 40, writeback_step=0)
    try:
        logger.append_batch([(1, entry_id, os.urandom(64 * KiB)) for entry_id in range(4)])
        time.sleep(0.1)
        assert recorder.calls == []
    finally:
        logger.close()
