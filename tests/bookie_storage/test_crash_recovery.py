"""Crash recovery with real processes: kill -9, torn journal tails, mid-journal corruption, crash points.

Every test runs with both journal modes: references to entry-log records (the default) and full bodies."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bookie_server.journal_format import ADD, ADD_REF, COMMIT
from bookie_server.storage import LedgerView
from bookie_server.storage_config import LEDGER_SNAPSHOT_NAME, MARK_FILE_NAME
from pyspark_ledger.errors import CorruptStorageError, JournalCorruptError, NoSuchEntryError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import add_op, body
from tests.bookie_storage.helpers import flip_byte, journal_records, run_child, stream_then_kill


def assert_all_readable(storage, acks) -> None:
    assert acks, "the child acknowledged nothing"
    for ledger_id, entry_id in sorted(acks):
        assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id), (ledger_id, entry_id)


pytestmark = pytest.mark.usefixtures("journal_mode")  # every test runs with each journal mode (conftest)


def add_records(data_dir: Path):
    return [(path, offset, record) for path, offset, record in journal_records(data_dir)
            if record.kind in (ADD, ADD_REF)]


@pytest.mark.parametrize("where", ["body_end", "header_crc"])
def test_damaged_acknowledged_record_at_the_journal_tail_refuses_the_start(open_storage, data_dir, where):
    """Issue 12 part 5: the last record, full length, checksum bad, and the group's COMMIT record intact after it:
    it was acknowledged, so it is damage, not a torn write (it used to be truncated with a warning)."""
    child = run_child(data_dir, "--entries", "20")
    assert (1, 19) in child.acks
    path, last_offset, last = add_records(data_dir)[-1]
    tail = [record for _, offset, record in journal_records(data_dir) if offset > last_offset]
    assert [record.kind for record in tail] == [COMMIT]
    size = path.stat().st_size
    flip_byte(path, last.end - 10 if where == "body_end" else last_offset + 5)
    with pytest.raises(JournalCorruptError) as caught:
        open_storage()
    message = str(caught.value)
    assert str(path) in message and f"offset {last_offset}" in message and "--skip-journal-corruption" in message
    assert path.stat().st_size == size  # nothing truncated
    storage = open_storage(skip_journal_corruption=True)
    assert storage.damage_found() == 1
    assert_all_readable(storage, {(1, entry_id) for entry_id in range(19)})


def test_kill_9_during_concurrent_adds_loses_no_acknowledged_entry(open_storage, data_dir):
    child = stream_then_kill(data_dir, 4000, "--threads", "4", "--batch", "20", "--checkpoint-interval", "0.05",
                             "--journal-file-size", str(256 * 1024), "--entry-log-size", str(512 * 1024))
    assert child.returncode == -9
    storage = open_storage()
    assert_all_readable(storage, child.acks)
    for ledger_id in {ledger_id for ledger_id, _ in child.acks}:
        highest = max(entry_id for lid, entry_id in child.acks if lid == ledger_id)
        assert storage.ledger(ledger_id).last_entry_id >= highest


@pytest.mark.parametrize("damage", ["truncate_mid_record", "append_zeros", "truncate_in_commit_record"])
def test_torn_journal_tail_is_ignored_and_truncated(open_storage, data_dir, damage):
    child = run_child(data_dir, "--entries", "20")
    assert child.acks == {(1, entry_id) for entry_id in range(20)}
    path, last_offset, last = add_records(data_dir)[-1]
    assert last.entry_id == 19
    size = journal_records(data_dir)[-1][2].end  # the records' end (a file may hold preallocated zeros after it)
    os.truncate(path, size)
    if damage == "truncate_mid_record":
        os.truncate(path, last_offset + 30)
    elif damage == "append_zeros":
        with open(path, "ab") as file:
            file.write(bytes(8192))
    else:  # the write stopped inside the group's COMMIT record: the group's records are whole
        os.truncate(path, size - 5)

    storage = open_storage()
    assert_all_readable(storage, {(1, entry_id) for entry_id in range(19)})
    if damage == "append_zeros":
        assert storage.read_entry(1, 19) == body(1, 19)
        assert path.stat().st_size == size
    elif damage == "truncate_in_commit_record":  # applied, only the torn COMMIT record is cut off
        assert storage.read_entry(1, 19) == body(1, 19)
        assert path.stat().st_size == last.end
    else:  # the torn record was never acknowledged by a real bookie: it is gone
        with pytest.raises(NoSuchEntryError):
            storage.read_entry(1, 19)
        assert path.stat().st_size == last_offset
    assert storage.add_entries([add_op(1, 20)]).result(30) == [pb.OK]
    storage.close()
    assert open_storage().read_entry(1, 20) == body(1, 20)  # the truncated file is clean for later starts


def test_garbage_in_the_middle_stops_startup_unless_skipped(open_storage, data_dir):
    run_child(data_dir, "--entries", "20")
    path, offset, record = add_records(data_dir)[5]
    assert record.entry_id == 5
    with open(path, "r+b") as file:
        file.seek(offset + 20)
        file.write(b"\xde\xad\xbe\xef" * 8)

    with pytest.raises(JournalCorruptError) as caught:
        open_storage()
    message = str(caught.value)
    assert str(path) in message and f"offset {offset}" in message and "skip_journal_corruption" in message

    storage = open_storage(skip_journal_corruption=True)
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(1, 5)
    assert_all_readable(storage, {(1, entry_id) for entry_id in range(20) if entry_id != 5})


def test_bad_record_in_an_older_journal_file_stops_startup(open_storage, data_dir):
    run_child(data_dir, "--entries", "10")
    run_child(data_dir, "--entries", "10", "--first-entry", "10")  # replays file 1, writes file 2
    records = add_records(data_dir)
    files = sorted({path for path, _, _ in records})
    assert len(files) == 2
    older = [(offset, record) for path, offset, record in records if path == files[0]]
    last_offset, last = older[-1]
    flip_byte(files[0], last.end - 5)  # would be a torn tail if this were the newest file
    with pytest.raises(JournalCorruptError, match=f"{files[0]}.*offset {last_offset}"):
        open_storage()
    storage = open_storage(skip_journal_corruption=True)
    assert_all_readable(storage, {(1, entry_id) for entry_id in range(9)} | {(1, e) for e in range(10, 20)})


@pytest.mark.parametrize("crash_point", ["checkpoint_after_mark_taken", "checkpoint_before_mark_persist"])
def test_crash_during_checkpoint_restores_everything(open_storage, data_dir, crash_point):
    first = run_child(data_dir, "--ledgers", "1", "2", "--entries", "30", "--batch", "7", "--finish", "close")
    second = run_child(data_dir, "--ledgers", "1", "2", "3", "--first-entry", "30", "--entries", "30",
                       "--batch", "7", "--fence", "2", "4", "--finish", "checkpoint",
                       env={"BOOKIE_CRASH_POINT": crash_point})
    assert second.returncode == 137  # the crash point ended the process
    assert second.fenced == {2, 4}
    acks = first.acks | second.acks
    assert len(acks) == 2 * 60 + 30

    for _ in range(2):  # a second start replays the same journal again: replay is idempotent
        storage = open_storage()
        assert_all_readable(storage, acks)
        assert storage.ledger(1) == LedgerView(1, False, 58, 59)
        assert storage.ledger(2) == LedgerView(2, True, 58, 59)
        assert storage.ledger(3) == LedgerView(3, False, 58, 59)
        assert storage.ledger(4) == LedgerView(4, True, -1, -1)
        with pytest.raises(NoSuchEntryError):
            storage.read_entry(3, 0)
        storage.close()


@pytest.mark.parametrize("before", ["nothing", "an empty checkpoint"])
def test_a_crash_between_a_new_ledgers_index_pages_and_the_snapshot_restarts(open_storage, data_dir, before):
    """docs/protocol.md B6, seen in CI: a checkpoint wrote the index pages of a ledger whose adds the journal had
    not yet made durable (a frozen journal thread), and the process died before the state snapshot was
    written. The start must not take that for a lost snapshot: the ledger never had a durable record, its
    index file is an orphan. The acknowledged ledger comes back whole."""
    if before == "an empty checkpoint":  # the first checkpoint found no ledger at all: it writes a snapshot
        run_child(data_dir, "--ledgers", "--finish", "close")
        assert (data_dir / LEDGER_SNAPSHOT_NAME).exists() and (data_dir / MARK_FILE_NAME).exists()
    child = run_child(data_dir, "--ledgers", "1", "--entries", "12", "--batch", "4", "--unjournaled", "2",
                      "--finish", "checkpoint", env={"BOOKIE_CRASH_POINT": "checkpoint_before_snapshot"})
    assert child.returncode == 137
    assert index_files(data_dir) == {1, 2}  # the checkpoint wrote ledger 2's pages, then the process died
    for _ in range(2):
        storage = open_storage()
        assert_all_readable(storage, child.acks)
        assert storage.ledger(1) == LedgerView(1, False, 10, 11)
        assert storage.ledger(2) is None
        assert index_files(data_dir) == {1}
        storage.close()


def test_after_such_a_crash_a_replay_that_skips_damage_keeps_the_unknown_ledger_s_index(open_storage, data_dir):
    """docs/protocol.md B6: the journal no longer proves which ledgers had durable records once a replay skipped
    a damaged record (``skip_journal_corruption``), so an unknown ledger's index file is not taken for an orphan:
    the start refuses and the file stays."""
    run_child(data_dir, "--ledgers", "1", "--entries", "12", "--batch", "4", "--unjournaled", "2",
              "--finish", "checkpoint", env={"BOOKIE_CRASH_POINT": "checkpoint_before_snapshot"})
    path, offset, _ = add_records(data_dir)[3]  # in the middle of ledger 1's acknowledged adds
    flip_byte(path, offset + 20)
    with pytest.raises(CorruptStorageError, match=f"{LEDGER_SNAPSHOT_NAME} is missing but ledger 2"):
        open_storage(skip_journal_corruption=True)
    assert index_files(data_dir) == {1, 2}


def index_files(data_dir: Path) -> set[int]:
    return {int(path.name.split(".")[0], 16) for path in (data_dir / "index").rglob("*.idx*")}


def test_fence_survives_a_crash(open_storage, data_dir):
    child = run_child(data_dir, "--ledgers", "1", "--entries", "3", "--fence", "1", "9")
    assert child.fenced == {1, 9}
    storage = open_storage()
    assert storage.ledger(1) == LedgerView(1, True, 1, 2)
    assert storage.ledger(9) == LedgerView(9, True, -1, -1)
    assert storage.add_entries([add_op(1, 3), add_op(9, 0)]).result(30) == [pb.FENCED, pb.FENCED]


def test_restart_after_a_crash_that_followed_replay(open_storage, data_dir):
    run_child(data_dir, "--ledgers", "1", "2", "--entries", "25", "--batch", "4")
    run_child(data_dir, "--ledgers", "2", "--entries", "0")  # replays, then crashes before any checkpoint
    storage = open_storage()
    assert_all_readable(storage, {(ledger_id, e) for ledger_id in (1, 2) for e in range(25)})
    assert storage.ledger(2) == LedgerView(2, False, 23, 24)
