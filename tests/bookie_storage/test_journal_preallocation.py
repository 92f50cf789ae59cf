"""The journal's preallocated zeros (``StorageConfig.journal_preallocate_bytes``): written ahead of the records (by a
thread of their own: test_journal_space.py) so a group commit's fdatasync changes no file metadata; cut when a file
is rotated or closed; after a kill, replay cuts them without calling them damage, and every acknowledged entry is
there."""
from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from bookie_server.journal import journal_files
from bookie_server.journal_format import JournalRecord, parse_record
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import add_op, body
from tests.bookie_storage.helpers import journal_records, stream_then_kill

MIB = 1024 * 1024


def add(storage, first: int, count: int = 10, ledger_id: int = 1) -> None:
    ops = [add_op(ledger_id, entry_id) for entry_id in range(first, first + count)]
    assert storage.add_entries(ops).result(30) == [pb.OK] * count


def files(data_dir):
    return [path for _, path in journal_files(data_dir / "journal")]


def test_the_file_runs_ahead_of_its_records_with_zeros_and_is_cut_to_them_on_close(open_storage, data_dir):
    storage = open_storage(journal_preallocate_bytes=2 * MIB)
    add(storage, 0)
    assert storage._journal._space.settled(30)
    offset = storage._journal.mark().offset
    path, = files(data_dir)
    size = path.stat().st_size
    assert offset + 2 * MIB <= size  # the last commit's end plus at least the step
    assert not path.read_bytes()[offset:].strip(b"\0")  # zeros only past the records
    storage.close()
    assert path.stat().st_size == offset  # a closed file ends with its last group commit
    reopened = open_storage(journal_preallocate_bytes=2 * MIB)
    assert [reopened.read_entry(1, entry_id) for entry_id in range(10)] == [body(1, entry_id) for entry_id in range(10)]


def test_a_rotated_file_is_cut_to_its_records_and_the_step_is_taken_again_only_when_reached(open_storage, data_dir):
    storage = open_storage(journal_preallocate_bytes=MIB, journal_file_size=64 * 1024)
    add(storage, 0)
    assert storage._journal._space.settled(30)
    first = files(data_dir)[0]
    size_after_one = first.stat().st_size
    add(storage, 10)
    assert storage._journal.mark().offset <= size_after_one  # the records landed on zeros the file had
    for start in range(20, 200, 10):
        add(storage, start)
    paths = files(data_dir)
    assert len(paths) > 1
    for path in paths[:-1]:  # closed files: no zeros after their last record
        data = path.read_bytes()
        ends = [record.end for found, _, record in journal_records(data_dir) if found == path]
        assert len(data) == ends[-1]
    assert paths[-1].stat().st_size > storage._journal.mark().offset


def test_zero_turns_it_off(open_storage, data_dir):
    storage = open_storage(journal_preallocate_bytes=0)
    add(storage, 0)
    path, = files(data_dir)
    assert path.stat().st_size == storage._journal.mark().offset


def test_a_killed_bookie_restarts_with_every_acknowledged_entry_and_calls_the_zeros_no_torn_tail(open_storage,
                                                                                               data_dir, caplog):
    child = stream_then_kill(data_dir, 500, "--threads", "2", "--batch", "10")
    assert child.returncode == -9
    newest = files(data_dir)[-1]
    records_end, torn = records_until_torn(newest)
    assert newest.stat().st_size > records_end  # the kill left the preallocated zeros
    with caplog.at_level(logging.INFO, logger="bookie_server.journal_replay"):
        storage = open_storage()
    assert newest.stat().st_size == records_end
    if torn:  # SIGKILL cut a buffered write short at a page boundary: an unacknowledged record, torn (rare)
        assert "torn tail" in caplog.text
    else:
        assert "preallocated" in caplog.text and "torn tail" not in caplog.text
    for ledger_id, entry_id in child.acks:
        assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id)


def records_until_torn(path: Path) -> tuple[int, bool]:
    """Where the whole records of a killed journal file end, and whether a torn one follows them: the kernel
    stops a buffered write at a page boundary once SIGKILL is pending, so the kill can leave the last record
    of a group commit half written, over the zeros (never acknowledged: its fdatasync had not run)."""
    data = path.read_bytes()
    offset = 0
    while offset < len(data) and data[offset:].strip(b"\0"):
        record = parse_record(data, offset, len(data))
        if not isinstance(record, JournalRecord):
            return offset, True
        offset = record.end
    return offset, False


def test_a_disk_too_full_to_preallocate_still_takes_the_records(open_storage, data_dir, monkeypatch, caplog):
    storage = open_storage(journal_preallocate_bytes=2 * MIB)
    add(storage, 0)

    real_pwrite = os.pwrite

    def no_space(fd, data, offset):  # for the journal's zeros (the entry log's direct writes still work)
        if "journal" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)
    monkeypatch.setattr(os, "pwrite", no_space)
    with caplog.at_level(logging.WARNING, logger="bookie_server.journal_space"):
        add(storage, 10, count=3000)  # past the step: preallocation is tried and fails
    assert "cannot preallocate" in caplog.text
    monkeypatch.undo()
    storage.close()
    reopened = open_storage()
    for entry_id in (0, 9, 10, 3009):
        assert reopened.read_entry(1, entry_id) == body(1, entry_id)
