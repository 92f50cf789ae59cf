"""Blocks allocated ahead of the current entry log (``StorageConfig.entry_log_preallocate_bytes``, docs/protocol.md
B8): appends land in blocks the file already has, the file's size -- and so every read and scan -- stays its
records', and the blocks past them are given back when the log is sealed or closed, or at the next open after a
kill -9; giving them back never changes a byte; a file system that cannot allocate ahead is appended to without.
These tests write through the page cache (``direct_io=False``), where the file's size is its records' end; the same
with direct writes (B9): tests/bookie_storage/test_entry_log_direct.py."""
from __future__ import annotations

import errno
import hashlib
import logging
import os
from pathlib import Path

import pytest

from bookie_server import entry_log as entry_log_module
from bookie_server import entry_log_ahead
from bookie_server.config import parse_args
from bookie_server.entry_log import EntryLogger
from bookie_server.entry_log_usage import EntryLogScan
from bookie_server.files import release_reserved, reserve_ahead
from bookie_server.storage import StorageConfig
from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import add_op, body
from tests.bookie_storage.helpers import run_child

MIB = 1024 * 1024
PAGE = 4096


def allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def batch(ledger_id: int, first: int, count: int, size: int = 10_000) -> list[tuple[int, int, bytes]]:
    return [(ledger_id, entry_id, bytes([entry_id % 251]) * size) for entry_id in range(first, first + count)]


def logs(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def test_appends_land_in_blocks_allocated_ahead_and_the_file_keeps_its_records_size(tmp_path):
    logger = EntryLogger(tmp_path, 1024 * MIB, preallocate_bytes=4 * MIB, direct_io=False)
    try:
        locations = logger.append_batch(batch(1, 0, 20))
        path, = logs(tmp_path)
        end = locations[-1][1] + entry_log_module.HEADER_SIZE + locations[-1][2]
        assert path.stat().st_size == end  # a reader's, a scan's view of the file: its records only
        assert allocated(path) >= end + 4 * MIB - PAGE  # the step ahead of the last record
        before = allocated(path)
        locations += logger.append_batch(batch(1, 20, 10))  # within the blocks already allocated: none added
        assert allocated(path) == before
        assert [logger.read(location, 1, entry_id) for entry_id, location in enumerate(locations)] == \
            [data for _, _, data in batch(1, 0, 30)]
        scan = EntryLogScan(path)
        assert [record.entry_id for record in scan.records()] == list(range(30))
        assert scan.damage is None and scan.torn_bytes == 0
    finally:
        logger.close()


def test_without_preallocation_a_log_has_the_blocks_of_its_records_only(tmp_path):
    logger = EntryLogger(tmp_path, 1024 * MIB, preallocate_bytes=0, direct_io=False)
    try:
        logger.append_batch(batch(1, 0, 20))
        path, = logs(tmp_path)
        assert allocated(path) < path.stat().st_size + 256 * 1024
    finally:
        logger.close()


def test_sealing_and_closing_give_back_the_blocks_past_the_records_and_keep_every_byte(tmp_path):
    logger = EntryLogger(tmp_path, 1024 * MIB, preallocate_bytes=4 * MIB, direct_io=False)
    logger.append_batch(batch(1, 0, 20))
    sealed_path, = logs(tmp_path)
    content = hashlib.sha256(sealed_path.read_bytes()).digest()
    assert allocated(sealed_path) > sealed_path.stat().st_size + MIB
    assert logger.rotate() is not None  # the garbage collector's early seal
    assert allocated(sealed_path) <= sealed_path.stat().st_size + PAGE
    assert hashlib.sha256(sealed_path.read_bytes()).digest() == content
    logger.append_batch(batch(2, 0, 5))
    current = logs(tmp_path)[-1]
    assert current != sealed_path and allocated(current) > current.stat().st_size + MIB
    logger.close()
    assert allocated(current) <= current.stat().st_size + PAGE


def test_a_log_that_reaches_its_size_is_sealed_and_nothing_is_allocated_past_that_size(tmp_path):
    logger = EntryLogger(tmp_path, MIB, preallocate_bytes=16 * MIB, direct_io=False)
    try:
        logger.append_batch(batch(1, 0, 10))
        first, = logs(tmp_path)
        assert allocated(first) <= MIB + PAGE  # capped at the size at which the log is sealed
        logger.append_batch(batch(1, 10, 100))  # passes the size: the next append starts another log
        logger.append_batch(batch(1, 110, 1))
        assert len(logs(tmp_path)) == 2
        assert allocated(first) <= first.stat().st_size + PAGE  # sealed: given back
    finally:
        logger.close()


def test_giving_back_truncates_to_the_files_own_size_so_no_byte_changes(tmp_path):
    path = tmp_path / "file"
    data = os.urandom(3 * MIB + 123)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    try:
        reserve_ahead(fd, len(data), 8 * MIB)
        assert path.stat().st_size == len(data) and allocated(path) >= len(data) + 8 * MIB
        assert release_reserved(fd) == len(data)
    finally:
        os.close(fd)
    assert path.read_bytes() == data
    assert allocated(path) <= len(data) + PAGE


def test_a_log_left_with_blocks_ahead_by_a_kill_is_given_them_back_at_the_next_open(tmp_path, open_storage):
    directory = tmp_path / "killed"
    done = run_child(directory, "--entries", "40", "--finish", "crash")  # default preallocation; exits unclosed
    assert done.returncode == 0, done.lines
    path = logs(directory / "entry_logs")[-1]
    size, content = path.stat().st_size, hashlib.sha256(path.read_bytes()).digest()
    assert allocated(path) > size + MIB  # what a process killed before sealing leaves
    storage = open_storage(directory, entry_log_direct_io=False)
    assert allocated(path) <= size + PAGE
    assert path.stat().st_size == size and hashlib.sha256(path.read_bytes()).digest() == content
    assert [storage.read_entry(1, entry_id) for entry_id in range(40)] == [body(1, entry_id) for entry_id in range(40)]


def refusing(monkeypatch, code: int) -> list[int]:
    """Make every allocation ahead fail with ``code``; the lengths asked for."""
    calls: list[int] = []

    def refuse(fd, start, length):
        calls.append(length)
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(entry_log_ahead, "reserve_ahead", refuse)
    return calls


def test_a_file_system_that_cannot_allocate_ahead_is_appended_to_without(tmp_path, monkeypatch, caplog):
    calls = refusing(monkeypatch, errno.EOPNOTSUPP)
    logger = EntryLogger(tmp_path, 1024 * MIB, preallocate_bytes=4 * MIB, direct_io=False)
    try:
        with caplog.at_level(logging.WARNING, logger="bookie_server.entry_log_ahead"):
            locations = [logger.append_batch(batch(1, first, 10)) for first in (0, 10, 20)]
        assert len(calls) == 1  # tried once, then not again
        assert "cannot allocate blocks ahead" in caplog.text
        assert logger.read(locations[2][9], 1, 29) == bytes([29]) * 10_000
        logger.rotate()
        logger.append_batch(batch(1, 30, 10))
        assert len(calls) == 1  # nor for the next log: this file system cannot
    finally:
        logger.close()


def test_the_storage_allocates_its_entry_logs_ahead_as_configured(open_storage, data_dir):
    storage = open_storage(entry_log_preallocate_bytes=2 * MIB, entry_log_direct_io=False)
    assert storage.add_entries([add_op(1, entry_id) for entry_id in range(5)]).result(30) == [pb.OK] * 5
    path, = logs(data_dir / "entry_logs")
    assert path.stat().st_size + MIB < allocated(path) <= path.stat().st_size + 2 * MIB + 2 * PAGE
    storage.close()
    assert allocated(path) <= path.stat().st_size + PAGE


def test_the_setting_is_bounded_where_it_enters(tmp_path):
    assert StorageConfig(tmp_path).entry_log_preallocate_bytes == 16 * MIB
    with pytest.raises(InvalidConfigurationError, match="entry_log_preallocate_bytes must be an integer >= 0"):
        StorageConfig(tmp_path, entry_log_preallocate_bytes=-1)
    with pytest.raises(InvalidConfigurationError, match="entry_log_preallocate_bytes must be at most 1073741824"):
        StorageConfig(tmp_path, entry_log_preallocate_bytes=1024 * MIB + 1)
    flags = ["--data-dir", str(tmp_path), "--port", "3181", "--metadata", "sqlite:///x.db"]
    assert parse_args(flags).storage_config().entry_log_preallocate_bytes == 16 * MIB
    assert parse_args(flags + ["--entry-log-preallocate-bytes", "0"]).storage_config().entry_log_preallocate_bytes == 0


def test_the_flag_names_its_limit(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--data-dir", str(tmp_path), "--port", "3181", "--metadata", "sqlite:///x.db",
                    "--entry-log-preallocate-bytes", str(2 * 1024 * MIB)])
    assert exit_info.value.code == 2
    assert "from 0 to 1073741824 (1 GiB)" in capsys.readouterr().err


def test_a_disk_without_room_for_the_step_is_appended_to_without_until_the_next_log(tmp_path, monkeypatch):
    calls = refusing(monkeypatch, errno.ENOSPC)
    logger = EntryLogger(tmp_path, 1024 * MIB, preallocate_bytes=4 * MIB, direct_io=False)
    try:
        logger.append_batch(batch(1, 0, 10))
        logger.append_batch(batch(1, 10, 10))
        assert len(calls) == 1  # not again within this log
        monkeypatch.setattr(entry_log_ahead, "reserve_ahead", reserve_ahead)  # room again
        logger.rotate()
        logger.append_batch(batch(1, 20, 10))
        current = logs(tmp_path)[-1]
        assert allocated(current) > current.stat().st_size + MIB  # the next log tried, and got its blocks
    finally:
        logger.close()
