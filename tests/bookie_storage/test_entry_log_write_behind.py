"""Entry-log write-behind (``bookie_server/entry_log.py``, ``WRITE_BEHIND_STEP``): each megabyte of a log's records is
handed to the kernel's writeback as it is written, page-aligned, once, in order, never past what was written, and a
new log starts from its own beginning; ``files.start_writeback`` asks a real kernel (Linux) without an fsync."""
from __future__ import annotations

import os
import sys

import pytest

from bookie_server import entry_log as entry_log_module
from bookie_server.entry_log import HEADER_SIZE, WRITE_BEHIND_STEP, EntryLogger
from bookie_server.files import start_writeback

PAGE = 4096


@pytest.fixture
def asked(monkeypatch):
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(entry_log_module, "start_writeback", lambda fd, offset, nbytes: calls.append((fd, offset,
                                                                                                      nbytes)))
    return calls


def test_each_step_of_a_log_is_handed_to_writeback_once_in_order(tmp_path, asked):
    logger = EntryLogger(tmp_path, max_log_size=1 << 40)
    body = os.urandom(10_000)
    written = 0
    for entry_id in range(1000):  # about 10 MB, in batches of 3
        if entry_id % 3 == 0:
            logger.append_batch([(1, entry_id + k, body) for k in range(3)])
            written += 3 * (HEADER_SIZE + len(body))
    logger.close()
    assert len(asked) >= written // WRITE_BEHIND_STEP - 1
    end = 0
    for _, offset, nbytes in asked:
        assert offset == end  # contiguous: each byte asked for once
        assert offset % PAGE == 0 and (offset + nbytes) % PAGE == 0
        assert nbytes >= WRITE_BEHIND_STEP - PAGE
        end = offset + nbytes
    assert written - end < WRITE_BEHIND_STEP + PAGE  # what is left is less than a step
    assert end <= written


def test_small_logs_ask_nothing_and_a_new_log_starts_from_its_beginning(tmp_path, asked):
    logger = EntryLogger(tmp_path, max_log_size=3 * WRITE_BEHIND_STEP // 2)
    logger.append_batch([(1, 0, b"x" * 1000)])
    assert asked == []  # under a step
    body = os.urandom(WRITE_BEHIND_STEP // 4)
    for entry_id in range(1, 12):  # past the size: a second (and third) log
        logger.append_batch([(1, entry_id, body)])
    logger.close()
    descriptors = [fd for fd, _, _ in asked]
    assert len(set(descriptors)) >= 2
    firsts = {}
    for fd, offset, _ in asked:
        firsts.setdefault(fd, offset)
    assert set(firsts.values()) == {0}  # each log's first ask starts at its own offset 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_the_kernel_is_asked_for_real(tmp_path):
    path = tmp_path / "data"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, os.urandom(2 * WRITE_BEHIND_STEP))
        assert start_writeback(fd, 0, 2 * WRITE_BEHIND_STEP) is True
        assert start_writeback(fd, 0, 0) is False  # nothing to ask
    finally:
        os.close(fd)
    assert start_writeback(fd, 0, PAGE) is False  # a closed descriptor: refused, not raised
