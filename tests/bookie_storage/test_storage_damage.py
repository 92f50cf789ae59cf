"""Damage to entry-log records and to the checkpoint files (mark, ledger-state snapshot, usage maps):
an error or a safe fallback, never absence and never wrong bytes (issue 12 part 5)."""
from __future__ import annotations

import os

import pytest

from bookie_server.entry_log import HEADER_SIZE, EntryLocation, EntryLogger
from bookie_server.journal import JournalMark, journal_files
from bookie_server.journal_replay import FIRST_FILE_ID, NO_MARK
from bookie_server.storage_config import LEDGER_SNAPSHOT_NAME, MARK_FILE_NAME
from bookie_server.storage_replay import snapshot_lost
from pyspark_ledger.errors import CorruptStorageError, NoSuchEntryError
from tests.bookie_storage.entries import body
from tests.bookie_storage.helpers import flip_byte
from tests.bookie_storage.test_entry_log_and_index import add_range, entry_logs, locate


@pytest.mark.parametrize("byte", range(HEADER_SIZE))
def test_every_entry_log_header_byte_is_checked(open_storage, data_dir, byte):
    storage = open_storage(journal_inline_max_bytes=0, journal_write_data=False)
    add_range(storage, 1, range(5))
    storage.checkpoint()
    path, body_offset = locate(data_dir, body(1, 3))
    flip_byte(path, body_offset - HEADER_SIZE + byte)
    with pytest.raises(CorruptStorageError) as caught:
        storage.read_entry(1, 3)
    assert not isinstance(caught.value, NoSuchEntryError) and str(path) in str(caught.value)
    assert [storage.read_entry(1, e) for e in (0, 1, 2, 4)] == [body(1, e) for e in (0, 1, 2, 4)]


@pytest.mark.parametrize("damage", ["flip", "zero", "truncate", "empty"])
@pytest.mark.parametrize("name", [MARK_FILE_NAME, LEDGER_SNAPSHOT_NAME])
def test_a_damaged_checkpoint_file_stops_the_start_with_its_name(open_storage, data_dir, name, damage):
    storage = open_storage()
    add_range(storage, 1, range(10))
    storage.checkpoint()
    storage.close()
    path = data_dir / name
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x10
    elif damage == "zero":
        data[4:12] = bytes(8)
    elif damage == "truncate":
        data = data[:-3]
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStorageError, match=str(path)):
        open_storage()


def test_a_missing_snapshot_does_not_delete_the_ledgers_data(open_storage, data_dir):
    """The snapshot holds the only record of a ledger whose journal was trimmed by a checkpoint: without it the
    start must refuse, not take the ledger's index files for orphans and delete them."""
    storage = open_storage()
    add_range(storage, 1, range(10))
    storage.checkpoint()
    storage.close()
    index_files = sorted(p for p in (data_dir / "index").rglob("*") if p.is_file())
    assert index_files
    (data_dir / LEDGER_SNAPSHOT_NAME).unlink()
    with pytest.raises(CorruptStorageError, match=f"{LEDGER_SNAPSHOT_NAME} is missing but ledger 1"):
        open_storage()
    assert sorted(p for p in (data_dir / "index").rglob("*") if p.is_file()) == index_files


def test_a_missing_snapshot_before_any_checkpoint_is_normal(open_storage, data_dir):
    """A crash before the first checkpoint leaves no snapshot: the journal brings every ledger back."""
    storage = open_storage()
    add_range(storage, 1, range(10))
    storage.close()  # close checkpoints: remove what it wrote but the journal, as after a crash before it
    (data_dir / LEDGER_SNAPSHOT_NAME).unlink(missing_ok=True)
    (data_dir / MARK_FILE_NAME).unlink(missing_ok=True)
    storage = open_storage()
    assert [storage.read_entry(1, e) for e in range(10)] == [body(1, e) for e in range(10)]


def test_a_missing_snapshot_and_mark_after_the_journal_was_trimmed_still_refuse(open_storage, data_dir):
    """docs/protocol.md B6: without the mark too, a journal whose first file is gone was trimmed by a checkpoint,
    which had written a snapshot: its loss is still a loss, and the ledgers' index files stay."""
    storage = open_storage(journal_file_size=4 * 1024)
    for first in range(0, 40, 10):
        add_range(storage, 1, range(first, first + 10))
        storage.checkpoint()
    storage.close()
    assert min(file_id for file_id, _ in journal_files(data_dir / "journal")) > FIRST_FILE_ID
    index_files = sorted(p for p in (data_dir / "index").rglob("*") if p.is_file())
    (data_dir / LEDGER_SNAPSHOT_NAME).unlink()
    (data_dir / MARK_FILE_NAME).unlink()
    with pytest.raises(CorruptStorageError, match=f"{LEDGER_SNAPSHOT_NAME} is missing but ledger 1"):
        open_storage()
    assert sorted(p for p in (data_dir / "index").rglob("*") if p.is_file()) == index_files


@pytest.mark.parametrize("skipped", [False, True])
@pytest.mark.parametrize("mark", [NO_MARK, JournalMark(FIRST_FILE_ID, 15), JournalMark(3, 0)])
@pytest.mark.parametrize("journal_ids", [[], [FIRST_FILE_ID], [FIRST_FILE_ID, 2], [2, 3]])
@pytest.mark.parametrize("missing", [False, True])
def test_a_missing_snapshot_is_a_loss_unless_no_checkpoint_ever_completed(missing, journal_ids, mark, skipped):
    never_written = missing and mark == NO_MARK and journal_ids[:1] == [FIRST_FILE_ID] and not skipped
    assert snapshot_lost(missing, mark, journal_ids, skipped) == (missing and not never_written)


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_usage_map_is_rebuilt_from_its_log(open_storage, data_dir, damage):
    storage = open_storage(entry_log_size=4 * 1024, journal_inline_max_bytes=0, journal_write_data=False)
    add_range(storage, 1, range(30), batch=3)
    storage.close()
    maps = sorted(p for p in (data_dir / "entry_logs").iterdir() if p.suffix != ".log")
    assert len(maps) >= 2
    for path in maps:
        if damage == "flip":
            flip_byte(path, path.stat().st_size // 2)
        elif damage == "truncate":
            path.write_bytes(path.read_bytes()[:-2])
        else:
            path.unlink()
    storage = open_storage(entry_log_size=4 * 1024)
    usage = storage._entry_log.usage()  # the collector's view: every log still charged to ledger 1
    assert sum(u.ledgers.get(1, 0) for u in usage.values()) == sum(len(body(1, e)) for e in range(30))


def test_a_damaged_location_cannot_make_a_read_allocate_its_length(tmp_path, monkeypatch):
    """A location from a damaged index naming a huge length: the header is checked before the body is read."""
    logger = EntryLogger(tmp_path, 1024 * 1024)
    try:
        (log_id, offset, length), = logger.append_batch([(1, 0, b"x" * 100)])
        logger.sync()
        sizes = []
        real_pread = os.pread

        def recording_pread(fd, size, at):
            sizes.append(size)
            return real_pread(fd, size, at)
        monkeypatch.setattr(os, "pread", recording_pread)
        with pytest.raises(CorruptStorageError, match="of 100 bytes"):
            logger.read(EntryLocation(log_id, offset, 2**31), 1, 0)
        assert max(sizes) == HEADER_SIZE
        assert logger.read(EntryLocation(log_id, offset, length), 1, 0) == b"x" * 100
    finally:
        logger.close()
