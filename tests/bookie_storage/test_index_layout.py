"""The index layout (issue 12 part 1): any entry id of any ledger id costs one page record, never a huge sparse
offset; version 1 files written by the old layout keep reading and are converted without losing an entry."""
from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from bookie_server.index import LedgerIndex
from bookie_server.index_format import (HEADER_BYTES, PAGE_BYTES, PAGE_SHIFT, RECORD_BYTES, SLOT_MASK, SLOT_SIZE,
                                        V1_HEADER)
from bookie_server.storage_config import LEDGER_SNAPSHOT_NAME
from pyspark_ledger.errors import NoSuchEntryError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import KEY, add_op, body
from tests.bookie_storage.helpers import run_child

HUGE_IDS = [0, 1023, 1024, 2**40, 2**62, 2**63 - 1]
LEDGERS = [1, 2**64 - 1]


def index_file(data_dir: Path, ledger_id: int) -> Path:
    return LedgerIndex(data_dir / "index", 1).index_path(ledger_id)


def add_each(storage, ledger_id: int, entry_ids) -> None:
    for entry_id in entry_ids:  # one add per batch: the LAC of each is entry_id - 1, any value is legal
        assert storage.add_entries([add_op(ledger_id, entry_id)]).result(30) == [pb.OK], entry_id


def assert_reads(storage, ledger_id: int, entry_ids) -> None:
    for entry_id in entry_ids:
        assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id), entry_id


def test_huge_entry_ids_store_checkpoint_and_read_back(open_storage, data_dir):
    storage = open_storage()
    for ledger_id in LEDGERS:
        add_each(storage, ledger_id, HUGE_IDS)
    storage.checkpoint()  # the old layout failed here (EFBIG / OverflowError) and failed every later add
    assert storage.failure is None
    assert storage.add_entries([add_op(7, 0)]).result(30) == [pb.OK]  # other ledgers are unaffected
    storage.checkpoint()
    pages = len({entry_id >> PAGE_SHIFT for entry_id in HUGE_IDS})
    for ledger_id in LEDGERS:
        assert index_file(data_dir, ledger_id).stat().st_size == HEADER_BYTES + pages * RECORD_BYTES
    storage.close()

    storage = open_storage()
    for ledger_id in LEDGERS:
        assert_reads(storage, ledger_id, HUGE_IDS)
        for absent in (1, 1025, 2**40 + 1, 2**63 - 2, 2**50):
            with pytest.raises(NoSuchEntryError):
                storage.read_entry(ledger_id, absent)
        assert storage.ledger(ledger_id).last_entry_id == 2**63 - 1


def test_huge_entry_ids_survive_kill_9_and_replay(open_storage, data_dir):
    acks = set()
    for position, entry_id in enumerate(HUGE_IDS):  # each child replays the journal of the ones before it
        finish = "checkpoint" if position == 2 else "crash"  # one checkpoint in the middle, then crashes
        child = run_child(data_dir, "--ledgers", *map(str, LEDGERS), "--first-entry", str(entry_id),
                          "--entries", "1", "--finish", finish)
        acks |= child.acks
    assert acks == {(ledger_id, entry_id) for ledger_id in LEDGERS for entry_id in HUGE_IDS}
    for _ in range(2):  # the first start replays and checkpoints at close; the second reads the files alone
        storage = open_storage()
        for ledger_id in LEDGERS:
            assert_reads(storage, ledger_id, HUGE_IDS)
        storage.close()


# --- version 1 files ---------------------------------------------------------------------------------------

_V1_SLOT = struct.Struct(">IQI")


def write_v1_index(path: Path, slots: dict[int, tuple[int, int, int]]) -> None:
    """The old writer: 16-byte header, then the slot of entry e at byte 16 + 16*e (a sparse file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        file.write(V1_HEADER)
        for entry_id, location in slots.items():
            file.seek(len(V1_HEADER) + entry_id * SLOT_SIZE)
            file.write(_V1_SLOT.pack(*location))


def write_v1_snapshot(path: Path, ledgers: dict[int, tuple[bool, int, int, bytes]]) -> None:
    """The old ledger-state snapshot: version 1 records without index page counts."""
    parts = [struct.pack(">4sII", b"PLLS", 1, len(ledgers))]
    for ledger_id, (fenced, lac, last, key) in ledgers.items():
        parts.append(struct.pack(">QBqqH", ledger_id, fenced, lac, last, len(key)) + key)
    data = b"".join(parts)
    path.write_bytes(data + struct.pack(">I", crc32c.crc32c(data)))


def test_version_1_files_read_and_convert_without_losing_an_entry(open_storage, data_dir):
    entry_ids = [0, 1, 5, 1023, 1024, 3 * 1024 + 7, 40 * 1024 + 1]  # pages 0, 1, 3, 40: holes between them
    storage = open_storage()
    for ledger_id in (1, 2):
        add_each(storage, ledger_id, entry_ids)
    locations = {(ledger_id, entry_id): storage._index.get(ledger_id, entry_id)
                 for ledger_id in (1, 2) for entry_id in entry_ids}
    storage.close()  # checkpoint: the journal has nothing left to replay; only the files below speak
    for ledger_id in (1, 2):  # what a bookie of the old layout left behind
        path = index_file(data_dir, ledger_id)
        path.unlink()
        write_v1_index(path, {entry_id: locations[ledger_id, entry_id] for entry_id in entry_ids})
    write_v1_snapshot(data_dir / LEDGER_SNAPSHOT_NAME,
                      {ledger_id: (False, entry_ids[-1] - 1, entry_ids[-1], KEY) for ledger_id in (1, 2)})

    storage = open_storage()
    assert_reads(storage, 1, entry_ids)  # read straight from the version 1 file
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(1, 2)
    assert storage.add_entries([add_op(2, 2)]).result(30) == [pb.OK]  # a write into a converted page
    storage.checkpoint()
    for ledger_id in (1, 2):
        assert index_file(data_dir, ledger_id).read_bytes()[:8] == b"PLIX" + (2).to_bytes(4, "big")
    storage.close()
    storage = open_storage()
    assert_reads(storage, 1, entry_ids)
    assert_reads(storage, 2, entry_ids + [2])
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(2, 3)


def test_version_1_file_survives_a_crash_during_its_conversion(open_storage, data_dir):
    entry_ids = [0, 7, 2000]
    storage = open_storage()
    add_each(storage, 3, entry_ids)
    locations = {entry_id: storage._index.get(3, entry_id) for entry_id in entry_ids}
    storage.close()
    path = index_file(data_dir, 3)
    path.unlink()
    write_v1_index(path, locations)
    write_v1_snapshot(data_dir / LEDGER_SNAPSHOT_NAME, {3: (False, 1999, 2000, KEY)})
    # a child adds to the ledger (converting its file) and dies at the checkpoint, before the mark moves
    child = run_child(data_dir, "--ledgers", "3", "--first-entry", "2001", "--entries", "3", "--finish",
                      "checkpoint", env={"BOOKIE_CRASH_POINT": "checkpoint_before_mark_persist"})
    assert child.returncode == 137  # the crash point ended the process
    assert child.acks == {(3, 2001), (3, 2002), (3, 2003)}
    storage = open_storage()
    assert_reads(storage, 3, entry_ids + [2001, 2002, 2003])


def test_cached_page_layout_is_unchanged_for_the_add_path():
    # the add path packs 16-byte slots into 16 KiB cached pages, as before: its cost per entry is the same
    assert (SLOT_SIZE, PAGE_BYTES, SLOT_MASK) == (16, 16 * 1024, 1023)
