"""Garbage collection survives kill -9 at every step: real child processes, crash points, both journal modes.

After each crash the storage must start, every live ledger must read back
byte for byte, and a deleted ledger must be either whole (the deletion was
not durable yet) or gone (NO_SUCH_LEDGER) -- never half there. Collecting
again then removes it and every entry log it alone kept.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from bookie_server.entry_log import LOG_SUFFIX
from bookie_server.entry_log_usage import EntryLogScan
from bookie_server.files import numbered_files
from pyspark_ledger.errors import NoSuchLedgerError
from tests.bookie_storage.entries import body
from tests.bookie_storage.helpers import run_child, stream_then_kill

pytestmark = pytest.mark.usefixtures("journal_mode")

LOG_SIZE = str(16 * 1024)
RECLAIM_POINTS = ["gc_after_ledgers_deleted", "checkpoint_after_mark_taken", "checkpoint_before_mark_persist",
                  "checkpoint_before_index_unlink", "gc_before_entry_log_delete", "gc_after_entry_log_delete"]
COMPACTION_POINTS = ["compaction_after_copy", "checkpoint_after_mark_taken", "checkpoint_before_mark_persist",
                     "checkpoint_before_index_unlink", "compaction_before_log_delete", "gc_after_entry_log_delete"]


def whole_or_gone(storage, ledger_id: int, entries: range) -> str:
    """'gone' if the ledger is not there; 'whole' if every entry reads back exactly; else the test fails."""
    if storage.ledger(ledger_id) is None:
        with pytest.raises(NoSuchLedgerError):
            storage.read_entry(ledger_id, entries.start)
        return "gone"
    for entry_id in entries:
        assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id), (ledger_id, entry_id)
    assert storage.ledger(ledger_id).last_entry_id == entries.stop - 1
    return "whole"


def assert_readable(storage, ledger_ids, entries: range) -> None:
    for ledger_id in ledger_ids:
        for entry_id in entries:
            assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id), (ledger_id, entry_id)


def assert_collected(storage, data_dir: Path, live: set[int], deleted: set[int]) -> None:
    """Every entry log but the newest holds a live ledger; no index file of a deleted ledger is left."""
    logs = numbered_files(data_dir / "entry_logs", LOG_SUFFIX)
    for _, path in logs[:-1]:
        assert {record.ledger_id for record in EntryLogScan(path).records()} & live, path
    names = {path.name for path in (data_dir / "index").rglob("*.idx")}
    assert not names & {f"{ledger_id:016x}.idx" for ledger_id in deleted}
    for ledger_id in deleted:
        assert storage.ledger(ledger_id) is None


def collect(storage, deleted: set[int], threshold: float = 0.0) -> None:
    storage.delete_ledgers(sorted(deleted))
    storage.reclaim_entry_logs()
    if threshold:
        storage.compact_entry_logs(threshold)
        # the next pass: a wholly dead log that was the newest on disk at the first one (never removed then) is
        # not the newest once compaction started new logs
        storage.reclaim_entry_logs()


@pytest.mark.parametrize("crash_point", RECLAIM_POINTS)
def test_kill_during_reclaim(open_storage, data_dir, crash_point):
    run_child(data_dir, "--ledgers", "1", "2", "3", "--entries", "30", "--batch", "5", "--entry-log-size", LOG_SIZE,
              "--finish", "close")
    run_child(data_dir, "--ledgers", "1", "2", "3", "--first-entry", "30", "--entries", "10", "--batch", "5",
              "--entry-log-size", LOG_SIZE, "--delete", "2", "--reclaim", env={"BOOKIE_CRASH_POINT": crash_point},
              crash_expected=True)
    storage = open_storage(entry_log_size=16 * 1024)
    assert_readable(storage, [1, 3], range(40))
    state = whole_or_gone(storage, 2, range(40))
    if crash_point == "gc_after_ledgers_deleted":
        assert state == "whole"  # nothing was durable yet
    elif crash_point in ("checkpoint_before_index_unlink", "gc_before_entry_log_delete", "gc_after_entry_log_delete"):
        assert state == "gone"  # the mark and the snapshot already said so
    collect(storage, {2})
    assert_collected(storage, data_dir, {1, 3}, {2})
    storage.close()
    reopened = open_storage(entry_log_size=16 * 1024)
    assert_readable(reopened, [1, 3], range(40))
    assert_collected(reopened, data_dir, {1, 3}, {2})


@pytest.mark.parametrize("crash_point", COMPACTION_POINTS)
def test_kill_during_compaction(open_storage, data_dir, crash_point):
    run_child(data_dir, "--ledgers", "1", "2", "3", "4", "--entries", "30", "--batch", "2", "--interleave",
              "--entry-log-size", LOG_SIZE, "--finish", "close")
    run_child(data_dir, "--ledgers", "1", "2", "3", "4", "--first-entry", "30", "--entries", "6", "--batch", "2",
              "--interleave", "--entry-log-size", LOG_SIZE, "--delete", "2", "3", "4", "--compact", "0.5",
              env={"BOOKIE_CRASH_POINT": crash_point}, crash_expected=True)
    storage = open_storage(entry_log_size=16 * 1024)
    assert_readable(storage, [1], range(36))
    states = {whole_or_gone(storage, ledger_id, range(36)) for ledger_id in (2, 3, 4)}
    assert len(states) == 1  # deleted together, durable together
    collect(storage, {2, 3, 4}, threshold=0.5)
    assert_collected(storage, data_dir, {1}, {2, 3, 4})
    storage.close()
    reopened = open_storage(entry_log_size=16 * 1024)
    assert_readable(reopened, [1], range(36))
    assert_collected(reopened, data_dir, {1}, {2, 3, 4})


def test_kill_9_while_collecting_under_concurrent_adds(open_storage, data_dir):
    child = stream_then_kill(data_dir, 600, "--threads", "2", "--batch", "5", "--checkpoint-interval", "0.05",
                             "--journal-file-size", str(128 * 1024), "--entry-log-size", str(64 * 1024),
                             "--gc-churn", min_churn=5)
    assert child.returncode == -9 and child.logs_removed_by_churn > 0
    storage = open_storage()
    live_acks = {ack for ack in child.acks if ack[0] < 1000}
    assert live_acks
    for ledger_id, entry_id in sorted(live_acks):
        assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id)
    churned = sorted(ledger_id for ledger_id in storage.ledger_ids() if ledger_id >= 1000)
    for ledger_id in churned:  # at most the ledgers in flight at the kill: whole or being written
        view = storage.ledger(ledger_id)
        for entry_id in range(view.last_entry_id + 1):
            assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id)
    collect(storage, set(churned))
    assert_collected(storage, data_dir, {1, 2}, set(churned))


ROTATION_POINTS = ["gc_after_rotation", "checkpoint_after_mark_taken", "checkpoint_before_mark_persist",
                   "checkpoint_before_index_unlink", "gc_before_entry_log_delete", "gc_after_entry_log_delete",
                   "compaction_after_copy", "compaction_before_log_delete"]
COMPACTION_ONLY = {"compaction_after_copy", "compaction_before_log_delete"}


@pytest.mark.parametrize("crash_point", ROTATION_POINTS)
@pytest.mark.parametrize("deleted", [(2, 3), (1, 2, 3)], ids=["then-compacted", "then-deleted"])
def test_kill_while_collecting_the_current_log(open_storage, data_dir, crash_point, deleted):
    """Ledgers 1-3 share the current log (default size: it never fills); some are deleted, the log is sealed
    early, then deleted (all three gone) or compacted (ledger 1, about a third, copied out). A kill -9 at any
    step loses no acknowledged entry; collecting again after the restart takes every deleted byte."""
    run_child(data_dir, "--ledgers", "4", "--entries", "30", "--batch", "5", "--finish", "close")  # a sealed log
    child = run_child(data_dir, "--ledgers", "1", "2", "3", "--entries", "30", "--batch", "5", "--interleave",
                      "--delete", *map(str, deleted), "--rotate", "0.5", "--reclaim", "--compact", "0.5",
                      env={"BOOKIE_CRASH_POINT": crash_point},
                      crash_expected=len(deleted) == 2 or crash_point not in COMPACTION_ONLY)
    live = {1, 2, 3, 4} - set(deleted)
    assert {ledger_id for ledger_id, _ in child.acks} == {1, 2, 3} and len(child.acks) == 90
    storage = open_storage()
    assert_readable(storage, live, range(30))  # every acknowledged entry of a live ledger
    states = {whole_or_gone(storage, ledger_id, range(30)) for ledger_id in deleted}
    assert len(states) == 1  # deleted together, durable together
    if crash_point in ("gc_after_rotation", "checkpoint_after_mark_taken"):
        assert states == {"whole"}  # nothing was durable yet
    elif crash_point != "checkpoint_before_mark_persist":
        assert states == {"gone"}
    storage.delete_ledgers(list(deleted))
    storage.rotate_entry_log(0.5, min_bytes=1)
    collect(storage, set(), threshold=0.5)
    storage.reclaim_entry_logs()  # the next pass: an empty log the rotation left goes once a newer one exists
    assert_collected(storage, data_dir, live, set(deleted))
    assert not ledgers_in_logs(data_dir) & set(deleted)  # not in the newest log either
    storage.close()
    reopened = open_storage()
    assert_readable(reopened, live, range(30))
    assert_collected(reopened, data_dir, live, set(deleted))


def ledgers_in_logs(data_dir: Path) -> set[int]:
    return {record.ledger_id for _, path in numbered_files(data_dir / "entry_logs", LOG_SUFFIX)
            for record in EntryLogScan(path).records()}
