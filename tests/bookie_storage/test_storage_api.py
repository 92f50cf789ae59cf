"""The storage façade's contract: statuses of adds and fences, reads, views, long polls, restart."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from bookie_server.storage import AddOp, BookieStorage, LedgerView, StorageConfig
from pyspark_ledger.errors import (InvalidArgumentError, InvalidConfigurationError, NoSuchEntryError, NoSuchLedgerError,
                                   StorageError)
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import KEY, OTHER_KEY, add_op, body


def add_all(storage, ops):
    return storage.add_entries(ops).result(timeout=30)


def wait_until_polling(storage, ledger_id):
    """Bounded wait until a long poll on the ledger is registered (so the wake-up path is exercised)."""
    deadline = time.monotonic() + 30
    while not storage._lacs.polled(ledger_id):  # white-box: the storage's table of long polls
        assert time.monotonic() < deadline, "the long poll never started"
        time.sleep(0.001)


def file_sizes(directory: Path) -> dict[str, int]:
    return {str(path.relative_to(directory)): path.stat().st_size
            for path in directory.rglob("*") if path.is_file()}


def test_adds_read_back_and_survive_restart(open_storage, data_dir):
    storage = open_storage()
    assert add_all(storage, [add_op(1, e) for e in range(50)]) == [pb.OK] * 50
    assert add_all(storage, [add_op(2, e, lac=e - 2) for e in range(10)]) == [pb.OK] * 10
    assert storage.read_entry(1, 17) == body(1, 17)  # readable before any checkpoint
    assert storage.ledger(1) == LedgerView(1, False, 48, 49)
    storage.close()
    storage.close()  # idempotent

    reopened = open_storage()
    for entry_id in range(50):
        assert reopened.read_entry(1, entry_id) == body(1, entry_id)
    assert reopened.ledger(1) == LedgerView(1, False, 48, 49)
    assert reopened.ledger(2) == LedgerView(2, False, 7, 9)
    assert reopened.ledger(3) is None


def test_absent_ledger_and_entry_are_explicit(open_storage):
    storage = open_storage()
    add_all(storage, [add_op(1, 0), add_op(1, 2)])
    with pytest.raises(NoSuchLedgerError):
        storage.read_entry(9, 0)
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(1, 1)
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(1, 5000)
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(1, -1)


def test_malformed_adds_are_bad_requests_and_the_rest_of_the_batch_is_stored(open_storage):
    storage = open_storage()
    ops = [
        add_op(1, 0),
        AddOp(1, 1, b"", body(1, 1)),  # empty master key
        AddOp(1, 2, KEY, b"not an entry"),  # unparsable header
        AddOp(1, 3, KEY, body(1, 4)),  # header names another entry
        AddOp(2, 5, KEY, body(1, 5)),  # header names another ledger
        AddOp(1, -1, KEY, body(1, 6)),
        AddOp(1, 7, KEY, None),  # type: ignore[arg-type]
        add_op(1, 8),
    ]
    assert add_all(storage, ops) == [pb.OK] + [pb.BAD_REQUEST] * 6 + [pb.OK]
    assert storage.ledger(2) is None
    assert storage.ledger(1).last_entry_id == 8
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(1, 3)


def test_wrong_master_key_is_unauthorized_and_writes_nothing(open_storage, data_dir):
    storage = open_storage()
    add_all(storage, [add_op(1, 0)])
    assert storage._journal._space.settled(30)  # the journal's zeros ahead are written (they grow the file)
    sizes = file_sizes(data_dir)
    assert add_all(storage, [add_op(1, 1, OTHER_KEY)]) == [pb.UNAUTHORIZED]
    assert storage.fence(1, OTHER_KEY).result(30) == pb.UNAUTHORIZED
    assert file_sizes(data_dir) == sizes  # nothing journaled, nothing in the entry log
    assert storage.ledger(1) == LedgerView(1, False, -1, 0)
    assert storage.check_master_key(1, KEY) == pb.OK
    assert storage.check_master_key(1, OTHER_KEY) == pb.UNAUTHORIZED
    assert storage.check_master_key(2, KEY) == pb.NO_SUCH_LEDGER
    storage.close()
    with pytest.raises(NoSuchEntryError):
        open_storage().read_entry(1, 1)


def test_fence_blocks_adds_but_not_recovery_adds(open_storage):
    storage = open_storage()
    add_all(storage, [add_op(1, 0), add_op(1, 1)])
    assert storage.fence(1, KEY).result(30) == pb.OK
    assert storage.fence(1, KEY).result(30) == pb.OK  # fencing twice is fine
    assert add_all(storage, [add_op(1, 2)]) == [pb.FENCED]
    assert add_all(storage, [add_op(1, 2, recovery=True)]) == [pb.OK]
    assert storage.read_entry(1, 2) == body(1, 2)
    assert storage.ledger(1) == LedgerView(1, True, 1, 2)


def test_F5_a_fence_already_durable_writes_no_journal_record(open_storage):
    """docs/protocol.md F5: the fencing reads of a recovery find the fence on disk and journal nothing."""
    storage = open_storage()
    add_all(storage, [add_op(1, 0)])
    assert storage.fence(1, KEY).result(30) == pb.OK
    submitted = storage._journal.submitted  # white-box: journal submissions so far
    for _ in range(3):  # the fencing reads of a recovery: each answered at once, nothing journaled
        future = storage.fence(1, KEY)
        assert future.done() and future.result() == pb.OK
    assert storage._journal.submitted == submitted
    assert storage.fence(1, OTHER_KEY).result(30) == pb.UNAUTHORIZED  # the key is still checked first
    assert storage.fence(2, KEY).result(30) == pb.OK and storage._journal.submitted == submitted + 1
    assert add_all(storage, [add_op(1, 1)]) == [pb.FENCED]


def test_fence_of_unknown_ledger_creates_it_fenced(open_storage):
    storage = open_storage()
    assert storage.fence(5, KEY).result(30) == pb.OK
    assert storage.ledger(5) == LedgerView(5, True, -1, -1)
    assert add_all(storage, [add_op(5, 0)]) == [pb.FENCED]
    assert add_all(storage, [add_op(5, 0, OTHER_KEY, recovery=True)]) == [pb.UNAUTHORIZED]
    assert add_all(storage, [add_op(5, 0, recovery=True)]) == [pb.OK]


def test_fence_needs_a_master_key(open_storage):
    storage = open_storage()
    assert storage.fence(5, b"").result(30) == pb.BAD_REQUEST
    assert storage.fence(-1, KEY).result(30) == pb.BAD_REQUEST
    assert storage.ledger(5) is None


def test_long_poll_wakes_on_a_higher_lac(open_storage):
    storage = open_storage()
    add_all(storage, [add_op(1, 0, lac=-1)])
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(storage.wait_for_lac(1, 3, timeout_s=3600)))
    waiter.start()
    wait_until_polling(storage, 1)
    add_all(storage, [add_op(1, 1, lac=2)])  # LAC 2 is not above 3: keeps waiting
    add_all(storage, [add_op(1, 2, lac=4)])
    waiter.join(timeout=30)
    assert not waiter.is_alive(), "the long poll did not wake up on a higher LAC"
    assert answers == [LedgerView(1, False, 4, 2)]


def test_long_poll_times_out_with_the_current_view(open_storage):
    storage = open_storage()
    add_all(storage, [add_op(1, 0, lac=-1), add_op(1, 1, lac=0)])
    assert storage.wait_for_lac(1, 0, timeout_s=0.05) == LedgerView(1, False, 0, 1)
    assert storage.wait_for_lac(7, -1, timeout_s=0.05) is None
    assert storage.wait_for_lac(1, -1, timeout_s=60) == LedgerView(1, False, 0, 1)  # already above


def test_close_wakes_long_polls_and_refuses_later_requests(open_storage):
    storage = open_storage()
    add_all(storage, [add_op(1, 0)])
    answers = []
    waiter = threading.Thread(target=lambda: answers.append(storage.wait_for_lac(1, 10, timeout_s=3600)))
    waiter.start()
    wait_until_polling(storage, 1)
    storage.close()
    waiter.join(timeout=30)
    assert not waiter.is_alive(), "close did not wake the long poll"
    assert answers == [LedgerView(1, False, -1, 0)]
    assert add_all(storage, [add_op(1, 1)]) == [pb.IO_ERROR]
    assert storage.fence(1, KEY).result(30) == pb.IO_ERROR
    with pytest.raises(StorageError):
        storage.read_entry(1, 0)


def test_one_process_per_data_directory(open_storage, data_dir):
    open_storage()
    with pytest.raises(StorageError, match="in use"):
        open_storage()


def test_disk_usage(open_storage):
    free, total = open_storage().disk_usage()
    assert 0 < free <= total


@pytest.mark.parametrize("setting, value", [
    ("journal_max_wait_ms", -1), ("journal_max_batch_records", 0), ("journal_max_batch_bytes", 0),
    ("journal_file_size", 0), ("entry_log_size", -5), ("checkpoint_interval_s", float("nan")),
    ("skip_journal_corruption", "yes"), ("index_cache_bytes", 0), ("journal_file_size", 1.5),
])
def test_bad_configuration_names_the_setting(tmp_path, setting, value):
    with pytest.raises(InvalidConfigurationError, match=setting):
        StorageConfig(tmp_path, **{setting: value})


def test_storage_refuses_what_is_not_a_storage_config(tmp_path):
    """A wrong argument, not a bad setting: nothing is opened or created."""
    with pytest.raises(InvalidArgumentError, match="StorageConfig"):
        BookieStorage({"data_dir": str(tmp_path / "data")})
    assert not (tmp_path / "data").exists()


def test_configuration_defaults(tmp_path):
    config = StorageConfig(str(tmp_path))
    assert config.data_dir == tmp_path
    assert config.journal_dir == tmp_path / "journal"
