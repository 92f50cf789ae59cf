"""Index damage (issue 12 parts 2, 5 and 3): damage is never absence, a torn checkpoint write is never damage,
and one ledger's index failure stays that ledger's."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bookie_server.index import TORN_WRITE_ENV, LedgerIndex
from bookie_server.index_format import (DISK_SLOT_BYTES, HEADER_BYTES, PAGE_HEAD_BYTES, RECORD_BYTES,
                                        decode_page_head, record_offset)
from pyspark_ledger.errors import CorruptStorageError, NoSuchEntryError, StorageError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import add_op, body
from tests.bookie_storage.helpers import flip_byte, run_child


def index_file(data_dir: Path, ledger_id: int) -> Path:
    return LedgerIndex(data_dir / "index", 1).index_path(ledger_id)


def page_offset(path: Path, ledger_id: int, page_no: int) -> int:
    """Where the record of ``page_no`` starts in the file (found through the record headers)."""
    data = path.read_bytes()
    for position in range((len(data) - HEADER_BYTES) // RECORD_BYTES):
        if decode_page_head(data[record_offset(position):], ledger_id) == page_no:
            return record_offset(position)
    raise AssertionError(f"page {page_no} not in {path}")


def slot_offset(path: Path, ledger_id: int, entry_id: int) -> int:
    return page_offset(path, ledger_id, entry_id >> 10) + PAGE_HEAD_BYTES + (entry_id & 1023) * DISK_SLOT_BYTES


def add_range(storage, ledger_id: int, entry_ids: range, batch: int = 128) -> None:
    for first in range(entry_ids.start, entry_ids.stop, batch):
        ids = range(first, min(first + batch, entry_ids.stop))
        assert storage.add_entries([add_op(ledger_id, e) for e in ids]).result(30) == [pb.OK] * len(ids)


def write(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


STORED = range(0, 1030)  # pages 0 and 1 of ledger 1


def damage(kind: str, path: Path) -> set[int]:
    """Damage ledger 1's index file; return the stored entries that must now read as damaged."""
    if kind == "zeroed_slot":
        write(path, slot_offset(path, 1, 7), bytes(DISK_SLOT_BYTES))
        return {7}
    if kind == "flipped_slot":
        flip_byte(path, slot_offset(path, 1, 1027) + 5)
        return {1027}
    if kind == "zeroed_page_header":
        write(path, page_offset(path, 1, 1), bytes(PAGE_HEAD_BYTES))
        return set(range(1024, 1030))
    if kind == "zeroed_page":
        write(path, page_offset(path, 1, 0), bytes(RECORD_BYTES))
        return set(range(0, 1024))
    if kind == "truncated_tail":  # the last record loses its end: its page is unknown now
        last = 1 if page_offset(path, 1, 1) > page_offset(path, 1, 0) else 0
        os.truncate(path, path.stat().st_size - 100)
        return set(range(1024, 1030)) if last else set(range(0, 1024))
    if kind == "truncated_to_header":
        os.truncate(path, HEADER_BYTES)
        return set(STORED)
    if kind == "zeroed_file":
        write(path, 0, bytes(path.stat().st_size))
        return set(STORED)
    if kind == "missing_file":
        path.unlink()
        return set(STORED)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["zeroed_slot", "flipped_slot", "zeroed_page_header", "zeroed_page",
                                  "truncated_tail", "truncated_to_header", "zeroed_file", "missing_file"])
def test_damaged_index_reads_as_damage_never_as_absence(open_storage, data_dir, kind):
    storage = open_storage()
    add_range(storage, 1, STORED)
    add_range(storage, 2, range(20))
    storage.close()
    damaged = damage(kind, index_file(data_dir, 1))

    storage = open_storage()  # the bookie starts with a damaged index file
    for entry_id in STORED:
        if entry_id in damaged:
            with pytest.raises(CorruptStorageError):
                storage.read_entry(1, entry_id)
        else:
            assert storage.read_entry(1, entry_id) == body(1, entry_id), entry_id
    assert [storage.read_entry(2, e) for e in range(20)] == [body(2, e) for e in range(20)]
    assert storage.index_failures()["damaged_reads"] >= 1
    assert storage.add_entries([add_op(2, 20)]).result(30) == [pb.OK]
    storage.checkpoint()
    assert storage.failure is None


# --- torn checkpoint writes --------------------------------------------------------------------------------

TEAR_MID_SLOT_45 = PAGE_HEAD_BYTES + 45 * DISK_SLOT_BYTES + 7  # bytes of the record written before the crash


@pytest.mark.parametrize("journal_mode", ["references", "bodies"], indirect=True)
@pytest.mark.parametrize("tear", ["in_place", "append"])
def test_torn_index_write_in_a_checkpoint_is_never_damage(open_storage, data_dir, journal_mode, tear):
    first = run_child(data_dir, "--ledgers", "1", "--entries", "30", "--batch", "7", "--finish", "close")
    # in place: page 0 is rewritten with slots 30..59 new; append: page 1 is a new record at the file's end
    start = 30 if tear == "in_place" else 1024
    second = run_child(data_dir, "--ledgers", "1", "--first-entry", str(start), "--entries", "30", "--batch", "7",
                       "--finish", "checkpoint", env={TORN_WRITE_ENV: str(TEAR_MID_SLOT_45)})
    assert second.returncode == 137  # the torn write ended the process
    acks = first.acks | second.acks
    assert len(acks) == 60
    size = index_file(data_dir, 1).stat().st_size
    assert size == HEADER_BYTES + (RECORD_BYTES if tear == "in_place" else RECORD_BYTES + TEAR_MID_SLOT_45)

    for _ in range(2):  # replay, close (checkpoint), then read the files alone
        storage = open_storage()
        for ledger_id, entry_id in sorted(acks):
            assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id), entry_id
        with pytest.raises(NoSuchEntryError):
            storage.read_entry(1, start + 30)
        storage.close()


# --- one ledger's failure ----------------------------------------------------------------------------------

def test_a_ledger_whose_index_cannot_be_written_fails_alone_and_loses_nothing(open_storage, data_dir):
    storage = open_storage()
    add_range(storage, 1, range(50), batch=10)
    add_range(storage, 2, range(50), batch=10)
    blocked = index_file(data_dir, 2)
    blocked.mkdir(parents=True)  # ledger 2's index file cannot be created: every write of it fails
    storage.checkpoint()  # completes: ledger 1's pages are written, ledger 2 fails alone
    assert storage.failure is None
    assert storage.index_failures() == {"ledgers_failed": 1, "damaged_reads": 0, "pinned": 1}
    assert storage.add_entries([add_op(2, 50)]).result(30) == [pb.IO_ERROR]
    add_range(storage, 1, range(50, 80), batch=10)  # the others go on being written and checkpointed
    storage.checkpoint()
    assert [storage.read_entry(2, e) for e in range(50)] == [body(2, e) for e in range(50)]
    storage.close()  # its final checkpoint must not move the journal mark past ledger 2's records

    storage = open_storage()  # its file still cannot be opened: replay cannot index it, so it fails again
    assert storage.index_failures() == {"ledgers_failed": 1, "damaged_reads": 0, "pinned": 1}
    for entry_id in range(50):  # an error (IO_ERROR), never "no such entry"
        with pytest.raises(StorageError) as caught:
            storage.read_entry(2, entry_id)
        assert not isinstance(caught.value, NoSuchEntryError)
    assert [storage.read_entry(1, e) for e in range(80)] == [body(1, e) for e in range(80)]
    storage.close()
    blocked.rmdir()  # the cause is gone: a restart makes ledger 2 whole again
    storage = open_storage()
    assert storage.index_failures()["ledgers_failed"] == 0
    assert [storage.read_entry(2, e) for e in range(50)] == [body(2, e) for e in range(50)]
    assert [storage.read_entry(1, e) for e in range(80)] == [body(1, e) for e in range(80)]
    assert storage.add_entries([add_op(2, 50)]).result(30) == [pb.OK]
    storage.close()
    storage = open_storage()  # and the files alone hold it all
    assert [storage.read_entry(2, e) for e in range(51)] == [body(2, e) for e in range(51)]


def test_a_ledger_whose_pages_are_written_at_last_takes_adds_again(open_storage, data_dir):
    storage = open_storage()
    add_range(storage, 2, range(10))
    blocked = index_file(data_dir, 2)
    blocked.mkdir(parents=True)
    storage.checkpoint()
    assert storage.add_entries([add_op(2, 10)]).result(30) == [pb.IO_ERROR]
    blocked.rmdir()
    storage.checkpoint()  # every dirty page of ledger 2 written again and fsync'd: no longer failed or pinned
    assert storage.index_failures() == {"ledgers_failed": 1, "damaged_reads": 0, "pinned": 0}
    assert storage.add_entries([add_op(2, 10)]).result(30) == [pb.OK]
    storage.close()
    storage = open_storage()
    assert [storage.read_entry(2, e) for e in range(11)] == [body(2, e) for e in range(11)]


def test_a_ledger_whose_index_file_is_damaged_fails_alone_at_start_and_on_add(open_storage, data_dir):
    run_child(data_dir, "--ledgers", "1", "2", "--entries", "30", "--batch", "10", "--finish", "close")
    second = run_child(data_dir, "--ledgers", "1", "2", "--first-entry", "30", "--entries", "30", "--batch", "10")
    assert len(second.acks) == 60  # acknowledged, in the journal only (the child crashed before a checkpoint)
    path = index_file(data_dir, 2)
    offset = page_offset(path, 2, 0)
    header = path.read_bytes()[offset:offset + PAGE_HEAD_BYTES]
    write(path, offset, bytes(PAGE_HEAD_BYTES))  # ledger 2's only page can't be located

    for _ in range(2):  # the bookie starts; replay cannot index ledger 2's entries, so the mark stays put
        storage = open_storage()
        assert storage.failure is None
        assert storage.index_failures()["ledgers_failed"] == 1 and storage.index_failures()["pinned"] == 1
        assert [storage.read_entry(1, e) for e in range(60)] == [body(1, e) for e in range(60)]
        for entry_id in range(60):  # damage, never absence: not even the replayed ones read as missing
            with pytest.raises(CorruptStorageError):
                storage.read_entry(2, entry_id)
        assert storage.add_entries([add_op(2, 60), add_op(1, 60)]).result(30) == [pb.IO_ERROR, pb.OK]
        storage.checkpoint()
        assert storage.failure is None
        storage.close()
    write(path, offset, header)  # repaired: the journal still had every acknowledged entry of ledger 2
    storage = open_storage()
    assert storage.index_failures()["ledgers_failed"] == 0
    assert [storage.read_entry(2, e) for e in range(60)] == [body(2, e) for e in range(60)]


def test_an_add_that_cannot_load_its_page_fails_that_ledger_only(open_storage, data_dir):
    storage = open_storage()
    add_range(storage, 1, range(10))
    add_range(storage, 2, range(10))
    storage.close()
    path = index_file(data_dir, 2)
    write(path, 0, b"XXXX")  # the file header: no page of ledger 2 can be located

    storage = open_storage()
    statuses = storage.add_entries([add_op(1, 10), add_op(2, 10), add_op(1, 11)]).result(30)
    assert statuses == [pb.OK, pb.IO_ERROR, pb.OK]
    assert storage.failure is None and storage.index_failures()["ledgers_failed"] == 1
    with pytest.raises(StorageError):
        storage.read_entry(2, 3)
    storage.checkpoint()
    storage.close()
    storage = open_storage()
    assert [storage.read_entry(1, e) for e in range(12)] == [body(1, e) for e in range(12)]


def test_damage_past_the_checkpointed_page_count_is_what_a_crash_left(tmp_path):
    """A record at or past the count the last checkpoint recorded was appended by a checkpoint that did not
    complete: its content came from journal records after the mark, which replay puts again. A damaged slot
    there reads as empty (else a torn append would leave never-written entries reading as damaged for good);
    before the count it is damage."""
    from bookie_server.entry_log import EntryLocation

    index = LedgerIndex(tmp_path, cache_bytes=1 << 20)
    for entry_id in (0, 1024):
        index.put(9, entry_id, EntryLocation(1, entry_id, 10))
    copies = index.dirty_pages()
    assert index.mark_clean(copies, index.write_pages(copies)) == {9}
    path = index.index_path(9)
    for entry_id in (1, 1025):
        write(path, slot_offset(path, 9, entry_id), bytes(DISK_SLOT_BYTES))
    first = decode_page_head(path.read_bytes()[record_offset(0):], 9)
    second = 1 - first
    reopened = LedgerIndex(tmp_path, cache_bytes=1 << 20, durable_pages={9: 1})  # the snapshot knew 1 record
    assert reopened.get(9, (second << 10) + 1) is None
    with pytest.raises(CorruptStorageError):
        reopened.get(9, (first << 10) + 1)
    strict = LedgerIndex(tmp_path, cache_bytes=1 << 20, durable_pages={9: 2})
    with pytest.raises(CorruptStorageError):
        strict.get(9, (second << 10) + 1)
