"""Entry logs and the ledger index: rotation, damage detection, paging and memory pressure."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bookie_server.entry_log import EntryLocation
from bookie_server.index import PAGE_BYTES, PAGE_SLOTS, LedgerIndex
from bookie_server.index_format import MAGIC
from pyspark_ledger.errors import CorruptStorageError, NoSuchEntryError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import add_op, body


def entry_logs(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "entry_logs").glob("*.log"))


def add_range(storage, ledger_id: int, entry_ids: range, batch: int = 10) -> None:
    for first in range(entry_ids.start, entry_ids.stop, batch):
        ids = range(first, min(first + batch, entry_ids.stop))
        assert storage.add_entries([add_op(ledger_id, e) for e in ids]).result(30) == [pb.OK] * len(ids)


def locate(data_dir: Path, data: bytes) -> tuple[Path, int]:
    """The entry log file and offset where ``data`` is stored (searching the files' bytes)."""
    for path in entry_logs(data_dir):
        offset = path.read_bytes().find(data)
        if offset >= 0:
            return path, offset
    raise AssertionError("entry not found in any entry log")


def test_entry_logs_rotate_and_stay_readable(open_storage, data_dir):
    storage = open_storage(entry_log_size=8 * 1024)
    add_range(storage, 1, range(100), batch=5)
    add_range(storage, 2, range(50), batch=5)
    assert len(entry_logs(data_dir)) >= 5
    assert [storage.read_entry(1, e) for e in range(100)] == [body(1, e) for e in range(100)]
    storage.close()
    reopened = open_storage(entry_log_size=8 * 1024)
    assert [reopened.read_entry(2, e) for e in range(50)] == [body(2, e) for e in range(50)]


@pytest.mark.parametrize("restart", [False, True])
def test_corrupt_entry_log_bytes_are_an_error_not_a_missing_entry(open_storage, data_dir, restart):
    storage = open_storage()
    add_range(storage, 1, range(20))
    if restart:
        storage.close()
        storage = open_storage()
    else:
        storage.checkpoint()  # the entry log's records in the file (a direct-written log stages its newest, docs/protocol.md B9)
    path, offset = locate(data_dir, body(1, 7))
    with open(path, "r+b") as file:
        file.seek(offset + 100)
        file.write(b"\x00\xff")
    with pytest.raises(CorruptStorageError, match="checksum") as caught:
        storage.read_entry(1, 7)
    assert not isinstance(caught.value, NoSuchEntryError)
    assert storage.read_entry(1, 6) == body(1, 6)


def test_truncated_or_missing_entry_log_is_an_error(open_storage, data_dir):
    storage = open_storage(entry_log_size=4 * 1024)
    add_range(storage, 1, range(30), batch=3)
    storage.close()
    last_path, last_offset = locate(data_dir, body(1, 29))
    os.truncate(last_path, last_offset + 10)
    first_path, _ = locate(data_dir, body(1, 0))
    first_path.unlink()
    storage = open_storage()
    with pytest.raises(CorruptStorageError, match="truncated"):
        storage.read_entry(1, 29)
    with pytest.raises(CorruptStorageError, match="missing"):
        storage.read_entry(1, 0)
    assert storage.read_entry(1, 15) == body(1, 15)


def test_index_pages_are_flushed_evicted_and_reloaded(tmp_path):
    index = LedgerIndex(tmp_path, cache_bytes=2 * PAGE_BYTES)
    ledger_id = 0x1234
    entries = range(0, 5 * PAGE_SLOTS, 7)
    for entry_id in entries:
        index.put(ledger_id, entry_id, EntryLocation(1 + entry_id % 3, entry_id * 100, entry_id + 1))
    assert index.over_capacity  # five dirty pages, room for two: only a flush can free memory
    copies = index.dirty_pages()
    index.put(ledger_id, 1, EntryLocation(9, 9, 9))  # changed after the copy: must stay dirty
    index.write_pages(copies)
    index.mark_clean(copies)
    assert not index.over_capacity and index.cached_pages <= 2
    assert index.index_path(ledger_id) == tmp_path / "34" / "12" / "0000000000001234.idx"
    assert index.index_path(ledger_id).read_bytes().startswith(MAGIC)
    for entry_id in entries:
        assert index.get(ledger_id, entry_id) == EntryLocation(1 + entry_id % 3, entry_id * 100, entry_id + 1)
    assert index.get(ledger_id, 1) == EntryLocation(9, 9, 9)
    assert index.get(ledger_id, 2) is None
    assert index.get(ledger_id, 10 * PAGE_SLOTS) is None  # beyond the file
    assert index.get(77, 0) is None  # no index file at all
    assert [(c.ledger_id, c.page_no) for c in index.dirty_pages()] == [(ledger_id, 0)]


def test_damaged_index_file_is_an_error(tmp_path):
    index = LedgerIndex(tmp_path, cache_bytes=PAGE_BYTES)
    index.put(5, 3, EntryLocation(1, 0, 10))
    copies = index.dirty_pages()
    index.write_pages(copies)
    index.mark_clean(copies)
    with open(index.index_path(5), "r+b") as file:
        file.write(b"XXXX")
    reopened = LedgerIndex(tmp_path, cache_bytes=PAGE_BYTES, durable_pages={5: 1})  # as after a restart
    with pytest.raises(CorruptStorageError, match="index file"):
        reopened.get(5, 3)


def test_index_memory_pressure_triggers_a_checkpoint(open_storage, data_dir):
    storage = open_storage(index_cache_bytes=2 * PAGE_BYTES)  # background checkpoints otherwise off
    add_range(storage, 1, range(4 * PAGE_SLOTS), batch=256)
    deadline = time.monotonic() + 30
    while not (data_dir / "lastmark").exists():
        assert time.monotonic() < deadline, "no checkpoint was requested under index memory pressure"
        time.sleep(0.01)
    for entry_id in range(0, 4 * PAGE_SLOTS, 97):
        assert storage.read_entry(1, entry_id) == body(1, entry_id)
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(1, 4 * PAGE_SLOTS)
