"""The per-entry-log ledger map: kept while appending, persisted when a log is sealed, rebuilt at start."""
from __future__ import annotations

import logging
import os
from collections import Counter

import pytest

from bookie_server.entry_log import HEADER_SIZE, LOG_SUFFIX, EntryLogger
from bookie_server.entry_log_usage import USAGE_SUFFIX, EntryLogScan, load_usage, read_usage, usage_path
from bookie_server.files import numbered_files
from tests.bookie_storage.entries import body
from tests.bookie_storage.helpers import flip_byte

LOG_SIZE = 8 * 1024
_opened: list[EntryLogger] = []


@pytest.fixture(autouse=True)
def close_loggers():
    """Loggers a test leaves open (as a killed bookie would) are closed at teardown."""
    yield
    while _opened:
        _opened.pop().close()


def open_logger(directory) -> EntryLogger:
    logger = EntryLogger(directory, LOG_SIZE)
    _opened.append(logger)
    return logger


def fill(directory, ledgers=(1, 2, 3), entries=range(12)) -> EntryLogger:
    logger = open_logger(directory)
    for entry_id in entries:
        logger.append_batch([(ledger_id, entry_id, body(ledger_id, entry_id)) for ledger_id in ledgers])
    logger.sync()  # every record in the files (a direct-written log stages its newest, docs/protocol.md B9)
    return logger


def expected_usage(directory) -> dict[int, dict[int, int]]:
    """Each log's map computed from what the test wrote, by scanning with checksums."""
    found = {}
    for log_id, path in numbered_files(directory, LOG_SUFFIX):
        usage = Counter()
        for record in EntryLogScan(path).records():
            assert record.body == body(record.ledger_id, record.entry_id)
            usage[record.ledger_id] += record.length
        found[log_id] = dict(usage)
    return found


def maps(logger: EntryLogger) -> dict[int, dict[int, int]]:
    return {log_id: dict(usage.ledgers) for log_id, usage in logger.usage().items()}


def test_the_map_is_kept_while_appending_and_persisted_when_a_log_is_sealed(tmp_path):
    logger = fill(tmp_path)
    logs = numbered_files(tmp_path, LOG_SUFFIX)
    assert len(logs) >= 4
    assert maps(logger) == expected_usage(tmp_path)
    for log_id, path in logs[:-1]:
        assert read_usage(path).ledgers == maps(logger)[log_id]
    assert not usage_path(logs[-1][1]).exists()  # the current log is sealed when the logger closes
    logger.close()
    assert read_usage(logs[-1][1]).ledgers == maps(logger)[logs[-1][0]]


def test_a_restart_loads_the_persisted_maps_without_scanning(tmp_path, monkeypatch):
    fill(tmp_path).close()
    expected = expected_usage(tmp_path)
    import bookie_server.entry_log_usage as usage_module
    monkeypatch.setattr(usage_module.EntryLogScan, "records", lambda self: pytest.fail("scanned"))
    assert maps(open_logger(tmp_path)) == expected


@pytest.mark.parametrize("damage", ["missing", "flipped", "other_size"])
def test_a_missing_or_stale_map_is_rebuilt_by_scanning(tmp_path, damage):
    fill(tmp_path)  # not closed, like a killed bookie: the last log has no map
    logs = numbered_files(tmp_path, LOG_SUFFIX)
    expected = expected_usage(tmp_path)
    sidecar = usage_path(logs[0][1])
    if damage == "missing":
        sidecar.unlink()
    elif damage == "flipped":
        flip_byte(sidecar, 20)
    else:
        with open(logs[0][1], "ab") as file:  # the log is not the size the map was written for
            file.write(bytes(10))
    reopened = open_logger(tmp_path)
    assert maps(reopened) == expected
    assert all(usage.pinned is None for usage in reopened.usage().values())
    assert read_usage(logs[0][1]).ledgers == expected[logs[0][0]]  # persisted again
    assert read_usage(logs[-1][1]).ledgers == expected[logs[-1][0]]


@pytest.mark.parametrize("tail", ["cut_mid_record", "zeros"])
def test_a_torn_tail_is_not_damage(tmp_path, tail):
    logger = fill(tmp_path)
    _, last = numbered_files(tmp_path, LOG_SUFFIX)[-1]
    if tail == "cut_mid_record":
        os.truncate(last, logger._offset - 30)  # the records' end (a direct-written file runs on to its block's)
    else:
        with open(last, "ab") as file:
            file.write(bytes(4096))
    scan = EntryLogScan(last)
    records = list(scan.records())
    assert scan.damage is None and scan.torn_bytes > 0 and records
    usage, scanned = load_usage(last)
    assert scanned and usage.pinned is None


def test_damage_in_the_middle_pins_the_log(tmp_path, caplog):
    fill(tmp_path)
    log_id, path = numbered_files(tmp_path, LOG_SUFFIX)[1]
    usage_path(path).unlink()
    flip_byte(path, HEADER_SIZE + 50)  # the first record's body: valid records follow it
    with caplog.at_level(logging.ERROR, logger="bookie_server.entry_log"):
        reopened = open_logger(tmp_path)
    pinned = reopened.usage()[log_id].pinned
    assert pinned and str(path) in pinned and "kept" in pinned
    assert pinned in caplog.text
    assert not usage_path(path).exists()  # a pinned map is never trusted to disk


def test_usage_files_of_removed_logs_are_cleaned_at_start(tmp_path):
    fill(tmp_path).close()
    log_id, path = numbered_files(tmp_path, LOG_SUFFIX)[0]
    path.unlink()  # as if killed between the two unlinks of remove_log
    assert usage_path(path).exists()
    reopened = open_logger(tmp_path)
    assert log_id not in reopened.usage()
    assert log_id not in dict(numbered_files(tmp_path, USAGE_SUFFIX))


def test_the_newest_log_cannot_be_removed(tmp_path):
    from pyspark_ledger.errors import StorageError
    logger = fill(tmp_path)
    newest = max(logger.usage())
    with pytest.raises(StorageError, match="newest"):
        logger.remove_log(newest)
    oldest = min(logger.usage())
    assert logger.remove_log(oldest) > 0
    assert oldest not in logger.usage() and not logger.path(oldest).exists()
