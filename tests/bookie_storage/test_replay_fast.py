"""The fast replay paths: chunked journal decoding (``journal_scan``), bodies found in place in the entry logs
(``replay_in_place``) and the checkpoint's replay hint (``replay_hint``)."""
from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import pytest

from bookie_server.entry_log import HEADER_SIZE as LOG_HEADER, LOG_SUFFIX, EntryLogger
from bookie_server.entry_log_usage import EntryLogScan
from bookie_server.files import numbered_files
from bookie_server.journal import JournalMark
from bookie_server.journal_format import (ADD, JournalRecord, encode_add, encode_commit, encode_file_header,
                                          encode_ledger_key, parse_record)
from bookie_server.journal_scan import scan_records
from bookie_server.replay_hint import HINT_FILE_NAME, read_hint, write_hint
from bookie_server.replay_in_place import GIVE_UP_AFTER, InPlaceMatcher
from tests.bookie_storage.entries import BUFFERED_ENTRY_LOGS_ENV, DIRECT_ENTRY_LOGS_ENV, KEY, body
from tests.bookie_storage.helpers import flip_byte, run_child


def journal_bytes(count: int, sizes=(100, 3000, 70_000)) -> bytes:
    records = [encode_file_header(), encode_ledger_key(1, KEY)]
    for entry_id in range(count):
        records.append(b"".join(encode_add(1, entry_id, os.urandom(sizes[entry_id % len(sizes)]))))
    records.append(encode_commit(count + 1, sum(map(len, records[1:]))))
    return b"".join(records)


def reference_walk(data: bytes, start: int) -> tuple[int, list[tuple]]:
    """The record-by-record decoder's answer: where the first bad record is, and every data record before it."""
    offset, found = start, []
    while offset < len(data):
        record = parse_record(data, offset, len(data))
        if not isinstance(record, JournalRecord):
            return offset, found
        if record.kind in (ADD, 2, 3, 4):
            found.append((record.kind, record.ledger_id, record.entry_id, bytes(record.data)))
        offset = record.end
    return offset, found


def fast_walk(path: Path, start: int, chunk: int) -> tuple[int, list[tuple]]:
    found = []
    with open(path, "rb") as file:
        bad, applied = scan_records(file.fileno(), start, os.fstat(file.fileno()).st_size,
                                    lambda ledger, entry, data: found.append((ADD, ledger, entry, bytes(data))),
                                    lambda r: found.append((r.kind, r.ledger_id, r.entry_id, bytes(r.data))),
                                    chunk_bytes=chunk)
    assert applied == len(found)
    return bad, found


@pytest.mark.parametrize("chunk", [16, 1000, 8 * 1024 * 1024])
def test_chunked_decoding_reads_what_the_record_decoder_reads(tmp_path, chunk):
    """Records cut by chunk ends and records larger than a chunk (the buffer grows) decode the same."""
    data = journal_bytes(12)
    path = tmp_path / "j"
    path.write_bytes(data)
    assert fast_walk(path, 0, chunk) == reference_walk(data, 0) == (len(data), reference_walk(data, 0)[1])
    assert len(reference_walk(data, 0)[1]) == 13


@pytest.mark.parametrize("chunk", [64, 8 * 1024 * 1024])
def test_chunked_decoding_stops_at_the_first_bad_record_like_the_record_decoder(tmp_path, chunk):
    rng = random.Random(16)
    clean = journal_bytes(9)
    for _ in range(40):
        data = bytearray(clean)
        kind = rng.choice(["flip", "cut", "zero"])
        where = rng.randrange(len(data))
        if kind == "flip":
            data[where] ^= 1 << rng.randrange(8)
        elif kind == "cut":
            del data[where:]
        else:
            data[where:where + 40] = bytes(len(data[where:where + 40]))
        path = tmp_path / "j"
        path.write_bytes(bytes(data))
        assert fast_walk(path, 0, chunk) == reference_walk(bytes(data), 0), (kind, where)


def write_log(directory: Path, entries: list[tuple[int, int, bytes]]) -> list:
    logger = EntryLogger(directory, 1 << 30)
    locations = logger.append_batch(entries)
    logger.close()
    return locations


def test_the_matcher_finds_bodies_in_order_and_hops_over_others(tmp_path):
    bodies = {(1, e): os.urandom(500 + e) for e in range(6)}
    # entry logs hold (1, 2) and (7, 0) between the journal's (1, 1) and (1, 3): another group's and a copy
    order = [(1, 0), (1, 1), (7, 0), (1, 2), (1, 3), (1, 4), (1, 5)]
    bodies[(7, 0)] = b"x" * 10
    locations = dict(zip(order, write_log(tmp_path, [(l, e, bodies[(l, e)]) for l, e in order])))
    matcher = InPlaceMatcher(tmp_path, (0, 0))
    try:
        for key in [(1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (1, 5)]:
            assert tuple(matcher.match(*key, memoryview(bodies[key]))) == tuple(locations[key])
        assert matcher.match(1, 6, b"past the end") is None
        assert matcher.adopted == {1} and matcher.matched == 6
    finally:
        matcher.close()


@pytest.mark.parametrize("damage", ["log_body", "log_crc", "other_bytes"])
def test_the_matcher_refuses_anything_but_the_journal_bytes_intact(tmp_path, damage):
    """A torn or damaged entry-log record, or one with other bytes, is not used: the body is written again."""
    first, second = os.urandom(300), os.urandom(300)
    locations = write_log(tmp_path, [(1, 0, first), (1, 1, second)])
    path = next(tmp_path.glob("*.log"))
    if damage == "log_body":
        flip_byte(path, locations[0][1] + LOG_HEADER + 10)
    elif damage == "log_crc":
        flip_byte(path, locations[0][1] + 5)
    matcher = InPlaceMatcher(tmp_path, (0, 0))
    try:
        journal_first = bytearray(first)
        if damage == "other_bytes":
            journal_first[7] ^= 1
        assert matcher.match(1, 0, bytes(journal_first)) is None
        assert tuple(matcher.match(1, 1, second)) == tuple(locations[1])  # the cursor goes on after a miss
    finally:
        matcher.close()


def test_the_matcher_gives_up_after_misses_in_a_row(tmp_path):
    data = os.urandom(100)
    write_log(tmp_path, [(1, 0, data)])
    matcher = InPlaceMatcher(tmp_path, (0, 0))
    try:
        for entry_id in range(GIVE_UP_AFTER):
            assert matcher.match(2, entry_id, data) is None
        assert matcher.match(1, 0, data) is None  # no longer looking
    finally:
        matcher.close()
    assert InPlaceMatcher(tmp_path, None).match(1, 0, data) is None  # no start known: never looks


def test_a_hint_is_used_only_for_its_mark_and_when_intact(tmp_path):
    mark = JournalMark(3, 4096)
    assert read_hint(tmp_path, mark) is None
    write_hint(tmp_path, mark, (5, 1234))
    assert read_hint(tmp_path, mark) == (5, 1234)
    assert read_hint(tmp_path, JournalMark(3, 4097)) is None
    flip_byte(tmp_path / HINT_FILE_NAME, 20)
    assert read_hint(tmp_path, mark) is None
    write_hint(tmp_path, mark, None)
    assert not (tmp_path / HINT_FILE_NAME).exists()


# --- whole storages: real child processes crash, the test restarts --------------------------------------------

@pytest.fixture
def buffered_entry_logs(monkeypatch):
    """Entry logs written through the page cache (the default, made explicit), whose bytes a killed process leaves in
    the file whatever their size (a direct-written log loses its staged records: tests at the end of this file)."""
    monkeypatch.setenv(BUFFERED_ENTRY_LOGS_ENV, "1")


BODIES = {"journal_write_data": True}  # every body in the journal: replay finds them all in the entry logs


def entry_logs(data_dir: Path) -> list[str]:
    return sorted(path.name for path in (data_dir / "entry_logs").glob("*.log"))


def found_in_place(caplog) -> int:
    lines = [r.getMessage() for r in caplog.records if "replayed" in r.getMessage()]
    return int(lines[-1].split("(")[1].split()[0])


def record_offset(log_path: Path, index: int) -> int:
    """The offset of the index-th record of an entry log."""
    data, offset = log_path.read_bytes(), 0
    for _ in range(index):
        offset += LOG_HEADER + int.from_bytes(data[offset + 24:offset + 28], "big")
    return offset


def read_all(storage, ledgers, entries) -> None:
    for ledger_id in ledgers:
        for entry_id in range(entries):
            assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id), (ledger_id, entry_id)


@pytest.mark.usefixtures("buffered_entry_logs")
def test_replay_indexes_bodies_in_place_and_the_next_checkpoint_fsyncs_their_log(open_storage, data_dir, caplog,
                                                                                   monkeypatch):
    run_child(data_dir, "--ledgers", "1", "2", "--entries", "30", "--batch", "4", "--interleave",
              env={"TEST_BOOKIE_JOURNAL_MODE": "bodies"})
    logs = entry_logs(data_dir)
    caplog.set_level(logging.INFO, logger="bookie_server.storage_replay")
    storage = open_storage(**BODIES)
    assert found_in_place(caplog) == 60
    read_all(storage, (1, 2), 30)
    assert entry_logs(data_dir) == logs  # nothing written again
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    storage.checkpoint()
    assert str(data_dir / "entry_logs" / logs[0]) in synced  # written by the crashed process, made durable now


@pytest.mark.usefixtures("buffered_entry_logs")
def test_a_damaged_entry_log_record_is_written_again_from_the_journal(open_storage, data_dir, caplog):
    run_child(data_dir, "--ledgers", "1", "--entries", "20", env={"TEST_BOOKIE_JOURNAL_MODE": "bodies"})
    log_path = data_dir / "entry_logs" / entry_logs(data_dir)[0]
    flip_byte(log_path, log_path.stat().st_size - 50)  # the last entry's body
    caplog.set_level(logging.INFO, logger="bookie_server.storage_replay")
    storage = open_storage(**BODIES)
    assert found_in_place(caplog) == 19
    read_all(storage, (1,), 20)
    assert len(entry_logs(data_dir)) == 2  # the one body written again, in a new log


@pytest.mark.usefixtures("buffered_entry_logs")
def test_a_crash_midway_through_replay_then_replaying_twice_loses_nothing(open_storage, data_dir, caplog):
    env = {"TEST_BOOKIE_JOURNAL_MODE": "bodies"}
    run_child(data_dir, "--ledgers", "1", "--entries", "30", env=env)
    log_path = data_dir / "entry_logs" / entry_logs(data_dir)[0]
    flip_byte(log_path, record_offset(log_path, 5) + LOG_HEADER + 3)  # entry 5's body: replay writes it again
    run_child(data_dir, "--entries", "0", env={**env, "BOOKIE_CRASH_POINT": "replay_after_a_batch"},
              crash_expected=True)  # replay applied a batch, then the process died
    run_child(data_dir, "--entries", "0", env=env)  # replays everything, then crashes before any checkpoint
    caplog.set_level(logging.INFO, logger="bookie_server.storage_replay")
    storage = open_storage(**BODIES)  # the third replay of the same journal
    read_all(storage, (1,), 30)
    assert found_in_place(caplog) >= 29
    storage.close()
    storage = open_storage(**BODIES)
    read_all(storage, (1,), 30)


@pytest.mark.usefixtures("buffered_entry_logs")
def test_a_checkpointed_bookie_replays_in_place_from_its_hint(open_storage, data_dir, caplog):
    env = {"TEST_BOOKIE_JOURNAL_MODE": "bodies"}
    run_child(data_dir, "--ledgers", "1", "--entries", "10", "--finish", "checkpoint", env=env)
    assert (data_dir / HINT_FILE_NAME).exists()
    run_child(data_dir, "--ledgers", "1", "--first-entry", "10", "--entries", "10", env=env)
    caplog.set_level(logging.INFO, logger="bookie_server.storage_replay")
    storage = open_storage(**BODIES)
    read_all(storage, (1,), 20)
    assert found_in_place(caplog) == 10


# --- direct-written entry logs (docs/protocol.md B9) -------------------------------------------------------------


def test_a_killed_direct_writer_replays_in_place_what_reached_the_file_and_writes_the_staged_rest_again(
        open_storage, data_dir, caplog):
    env = {"TEST_BOOKIE_JOURNAL_MODE": "bodies", DIRECT_ENTRY_LOGS_ENV: "1"}
    run_child(data_dir, "--ledgers", "1", "--entries", "4000", "--batch", "50", env=env)  # about 4 MiB of bodies
    on_file = [(record.ledger_id, record.entry_id) for _, path in
               numbered_files(data_dir / "entry_logs", LOG_SUFFIX) for record in EntryLogScan(path).records()]
    assert 1000 < len(on_file) < 4000  # the full buffers were written; the last ones were staged when it died
    assert on_file == [(1, entry_id) for entry_id in range(len(on_file))]
    caplog.set_level(logging.INFO, logger="bookie_server.storage_replay")
    storage = open_storage(**BODIES)
    assert found_in_place(caplog) == len(on_file)
    read_all(storage, (1,), 4000)
    storage.close()
    read_all(open_storage(**BODIES), (1,), 4000)


def test_a_checkpointed_direct_writer_replays_in_place_from_its_hint_over_the_padding(open_storage, data_dir,
                                                                                      caplog):
    env = {"TEST_BOOKIE_JOURNAL_MODE": "bodies", DIRECT_ENTRY_LOGS_ENV: "1"}
    run_child(data_dir, "--ledgers", "1", "--entries", "10", "--finish", "checkpoint", env=env)
    run_child(data_dir, "--ledgers", "1", "--first-entry", "10", "--entries", "3000", "--batch", "50", env=env)
    first, second = [path for _, path in numbered_files(data_dir / "entry_logs", LOG_SUFFIX)]  # one per process
    first_records = list(EntryLogScan(first).records())
    end = first_records[-1].offset + LOG_HEADER + first_records[-1].length
    assert len(first_records) == 10 and end % 4096 and first.stat().st_size == end + (-end) % 4096  # padded
    records = list(EntryLogScan(second).records())
    assert [record.entry_id for record in records] == list(range(10, 10 + len(records)))
    caplog.set_level(logging.INFO, logger="bookie_server.storage_replay")
    storage = open_storage(**BODIES)
    assert found_in_place(caplog) == len(records) > 1000  # from the hint, over the first log's padding
    read_all(storage, (1,), 3010)
