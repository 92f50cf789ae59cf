"""The journal's two modes: references to entry-log records (default) or full bodies (journal_write_data).

In reference mode each body is written once (to the entry log), every group
commit fsyncs the entry logs before its journal records, and replay reads
each referenced record back: missing or damaged data stops start-up.
"""
from __future__ import annotations

import os

import pytest

from bookie_server import entry_log, journal
from bookie_server.entry_log import LOG_SUFFIX
from bookie_server.files import numbered_files
from bookie_server.journal_format import ADD, ADD_REF
from pyspark_ledger.errors import InvalidConfigurationError, JournalCorruptError, NoSuchEntryError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import KEY, add_op, body
from tests.bookie_storage.helpers import flip_byte, journal_records, run_child


def journal_bytes(data_dir) -> int:
    return sum(path.stat().st_size for path in (data_dir / "journal").iterdir())


@pytest.mark.parametrize("write_data", [False, True])
def test_the_mode_decides_what_the_journal_holds(open_storage, data_dir, write_data):
    storage = open_storage(journal_write_data=write_data)
    ops = [add_op(1, entry_id) for entry_id in range(40)]
    assert storage.add_entries(ops).result(30) == [pb.OK] * 40
    kinds = {record.kind for _, _, record in journal_records(data_dir)} - {2}  # 2: the ledger key record
    body_bytes = sum(len(op.body) for op in ops)
    if write_data:
        assert kinds == {ADD} and journal_bytes(data_dir) > body_bytes
    else:
        assert kinds == {ADD_REF} and journal_bytes(data_dir) < body_bytes / 5
    storage.close()
    reopened = open_storage(journal_write_data=not write_data)  # either mode replays both kinds
    assert [reopened.read_entry(1, e) for e in range(40)] == [op.body for op in ops]


def test_each_group_commit_fsyncs_the_entry_logs_before_its_journal_records(open_storage, monkeypatch):
    calls: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    class OsSpy:  # the os module as the entry log and the journal see it
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def fsync(fd):
            calls.append("entry-log fsync")
            real_fsync(fd)

        @staticmethod
        def fdatasync(fd):
            calls.append("journal fdatasync")
            real_fdatasync(fd)

    storage = open_storage(journal_max_wait_ms=0)
    monkeypatch.setattr(entry_log, "os", OsSpy())
    monkeypatch.setattr(journal, "os", OsSpy())
    for entry_id in range(5):
        assert storage.add_entries([add_op(1, entry_id)]).result(30) == [pb.OK]
    commits = [index for index, call in enumerate(calls) if call == "journal fdatasync"]
    assert len(commits) == 5
    for previous, commit in zip([-1] + commits, commits):
        assert "entry-log fsync" in calls[previous + 1:commit], calls


def test_a_damaged_referenced_record_stops_start_up_unless_skipped(open_storage, data_dir):
    run_child(data_dir, "--entries", "12")  # reference mode; exits without a checkpoint
    logs = numbered_files(data_dir / "entry_logs", LOG_SUFFIX)
    refs = [record for _, _, record in journal_records(data_dir) if record.kind == ADD_REF]
    damaged = refs[4]
    assert damaged.entry_id == 4
    flip_byte(logs[0][1], damaged.reference.offset + 40)  # a byte of entry 4's body

    with pytest.raises(JournalCorruptError) as caught:
        open_storage()
    message = str(caught.value)
    assert "ledger 1 entry 4" in message and "skip_journal_corruption" in message

    storage = open_storage(skip_journal_corruption=True)
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(1, 4)
    assert [storage.read_entry(1, e) for e in range(12) if e != 4] == [body(1, e) for e in range(12) if e != 4]


def test_a_missing_entry_log_stops_start_up(open_storage, data_dir):
    run_child(data_dir, "--entries", "3")
    for _, path in numbered_files(data_dir / "entry_logs", LOG_SUFFIX):
        path.unlink()
    with pytest.raises(JournalCorruptError, match="ledger 1 entry 0 in entry log"):
        open_storage()


def test_a_failed_entry_log_fsync_fails_the_commit_and_later_adds(open_storage, monkeypatch):
    storage = open_storage()
    assert storage.add_entries([add_op(1, 0)]).result(30) == [pb.OK]

    class BrokenFsync:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def fsync(fd):
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(entry_log, "os", BrokenFsync())
    assert storage.add_entries([add_op(1, 1)]).result(30) == [pb.IO_ERROR]
    assert storage.add_entries([add_op(1, 2)]).result(30) == [pb.IO_ERROR]
    assert storage.fence(1, KEY).result(30) == pb.IO_ERROR
    assert storage.read_entry(1, 0) == body(1, 0)
    monkeypatch.undo()
    storage.close()
    reopened = open_storage()
    assert reopened.read_entry(1, 0) == body(1, 0)
    with pytest.raises(NoSuchEntryError):  # never acknowledged, never journaled
        reopened.read_entry(1, 1)


def test_the_setting_must_be_a_bool(data_dir):
    from bookie_server.storage import StorageConfig
    with pytest.raises(InvalidConfigurationError, match="journal_write_data must be True or False"):
        StorageConfig(data_dir, journal_write_data="yes")
