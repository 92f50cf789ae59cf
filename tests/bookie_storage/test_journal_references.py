"""What the journal holds: references to entry-log records, full bodies (journal_write_data), or, by default,
bodies up to journal_inline_max_bytes and references for larger ones.

A body journaled by reference is written once (to the entry log); a group
commit holding references fsyncs the entry logs before its journal records,
and replay reads each referenced record back: missing or damaged data stops
start-up. A group commit of inlined bodies alone needs only the journal's
fsync. Unless a test says otherwise, this module runs in references-only mode.
"""
from __future__ import annotations

import os

import pytest

from bookie_server import entry_log, journal
from bookie_server.entry_log import LOG_SUFFIX
from bookie_server.files import numbered_files
from bookie_server.journal_format import ADD, ADD_REF, FRAMING_KINDS, LEDGER_KEY
from pyspark_ledger.errors import InvalidConfigurationError, JournalCorruptError, NoSuchEntryError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import JOURNAL_MODE_ENV, JOURNAL_MODES, KEY, add_op, body
from tests.bookie_storage.helpers import flip_byte, journal_records, run_child


def journal_bytes(data_dir) -> int:
    """The bytes of the journal's records (a file may end with preallocated zeros)."""
    ends: dict = {}
    for path, _, record in journal_records(data_dir):
        ends[path] = record.end
    return sum(ends.values())


def spy_fsyncs(monkeypatch) -> list[str]:
    """Record, in order, the entry logs' fsyncs and the journal's fdatasyncs from now on (they still happen)."""
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

    monkeypatch.setattr(entry_log, "os", OsSpy())
    monkeypatch.setattr(journal, "os", OsSpy())
    return calls


@pytest.fixture(autouse=True)
def references_only(monkeypatch):
    monkeypatch.setenv(JOURNAL_MODE_ENV, "references")  # open_storage and the child process


@pytest.mark.parametrize("mode", sorted(JOURNAL_MODES))
def test_the_mode_decides_what_the_journal_holds(open_storage, data_dir, mode):
    settings = JOURNAL_MODES[mode]
    storage = open_storage(**settings)
    ops = [add_op(1, entry_id) for entry_id in range(40)]
    assert storage.add_entries(ops).result(30) == [pb.OK] * 40
    kinds = {record.entry_id: record.kind for _, _, record in journal_records(data_dir)
             if record.kind not in (LEDGER_KEY, *FRAMING_KINDS)}
    body_bytes = sum(len(op.body) for op in ops)
    if mode == "bodies":
        assert set(kinds.values()) == {ADD} and journal_bytes(data_dir) > body_bytes
    elif mode == "references":
        assert set(kinds.values()) == {ADD_REF} and journal_bytes(data_dir) < body_bytes / 5
    else:
        limit = settings["journal_inline_max_bytes"]
        assert kinds == {op.entry_id: ADD if len(op.body) <= limit else ADD_REF for op in ops}
        assert set(kinds.values()) == {ADD, ADD_REF}, "the test payloads straddle the limit"
    storage.close()
    reopened = open_storage(journal_write_data=mode != "bodies")  # every mode replays every kind
    assert [reopened.read_entry(1, e) for e in range(40)] == [op.body for op in ops]


def test_each_group_commit_fsyncs_the_entry_logs_before_its_journal_records(open_storage, monkeypatch):
    storage = open_storage(journal_max_wait_ms=0)
    calls = spy_fsyncs(monkeypatch)
    for entry_id in range(5):
        assert storage.add_entries([add_op(1, entry_id)]).result(30) == [pb.OK]
    commits = [index for index, call in enumerate(calls) if call == "journal fdatasync"]
    assert len(commits) == 5
    for previous, commit in zip([-1] + commits, commits):
        assert "entry-log fsync" in calls[previous + 1:commit], calls


def test_a_group_commit_of_inlined_bodies_alone_does_not_fsync_the_entry_logs(open_storage, monkeypatch):
    storage = open_storage(journal_max_wait_ms=0, journal_inline_max_bytes=64 * 1024)
    calls = spy_fsyncs(monkeypatch)
    for entry_id in range(5):
        assert storage.add_entries([add_op(1, entry_id)]).result(30) == [pb.OK]
    assert calls == ["journal fdatasync"] * 5
    big = add_op(1, 5)._replace(body=body(1, 5) + b"x" * (64 * 1024))  # a body past the limit: a reference
    calls.clear()
    assert storage.add_entries([big]).result(30) == [pb.OK]
    assert calls[-1] == "journal fdatasync" and "entry-log fsync" in calls
    monkeypatch.undo()
    storage.close()
    reopened = open_storage(journal_inline_max_bytes=64 * 1024)  # no checkpoint ran: all from the journal
    assert [reopened.read_entry(1, e) for e in range(5)] == [body(1, e) for e in range(5)]
    assert reopened.read_entry(1, 5) == big.body


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
    with pytest.raises(InvalidConfigurationError, match="journal_inline_max_bytes"):
        StorageConfig(data_dir, journal_inline_max_bytes=-1)
