"""The add path's shortcuts give the answers of the long way: header checks, batched records, page-cache drops."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bookie_server import entry_log as entry_log_module
from bookie_server import journal as journal_module
from bookie_server.entry_log import HEADER_SIZE, EntryLogger
from bookie_server.journal_format import ADD_REF, encode_add_ref, encode_add_refs, parse_record
from bookie_server.storage_requests import checked_lac
from pyspark_ledger.entry import DIGEST_HMAC_SHA256, EntryCodec, peek_header
from pyspark_ledger.errors import CorruptEntryError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import KEY, add_op, body

MiB = 1024 * 1024


def slow_lac(ledger_id: int, entry_id: int, data: bytes) -> int | None:
    """What ``checked_lac`` must answer, computed with ``peek_header`` alone."""
    try:
        header = peek_header(data)
    except CorruptEntryError:
        return None
    return header.last_add_confirmed if (header.ledger_id, header.entry_id) == (ledger_id, entry_id) else None


def test_the_fast_header_check_agrees_with_peek_header_on_good_and_bad_bodies():
    hmac_codec = EntryCodec(DIGEST_HMAC_SHA256, b"pw")
    good = [body(7, 3, lac=2), hmac_codec.encode(7, 3, 1, 0, b"x" * 100), hmac_codec.encode(7, 3, 1, 0, b"")]
    samples = []
    for data in good:
        samples += [data, data[:HEADER_SIZE + 3], data[:36], b"XX" + data[2:], data[:2] + b"\x09" + data[3:],
                    data[:3] + b"\x07" + data[3:]]
    for _ in range(2):  # the second round runs with every good prefix already learned
        for data in samples:
            for ledger_id, entry_id in ((7, 3), (7, 4), (8, 3)):
                add = (ledger_id, entry_id, KEY, data, False)
                assert checked_lac(add) == slow_lac(ledger_id, entry_id, data), (ledger_id, entry_id, data[:8])


def test_bodies_in_other_buffers_take_the_long_way_with_the_same_answer():
    data = body(7, 3, lac=2)
    checked_lac((7, 3, KEY, data, False))  # the prefix is learned
    for buffer in (bytearray(data), memoryview(data)):
        assert checked_lac((7, 3, KEY, buffer, False)) == 2


@pytest.mark.parametrize("add", [(-1, 0, KEY, body(1, 0), False), (1, -1, KEY, body(1, 0), False),
                                 (1, 0, b"", body(1, 0), False), (1, 0, KEY, None, False), (1, 0, KEY), None])
def test_malformed_adds_are_refused_not_raised(add):
    assert checked_lac(add) is None


def test_batched_add_references_are_the_single_records_back_to_back():
    entries = [(None, 9, entry_id, None, entry_id - 1) for entry_id in range(5)]
    locations = [(3, entry_id * 1000, 900 + entry_id) for entry_id in range(5)]
    records = bytes(encode_add_refs(entries, locations))
    assert records == b"".join(encode_add_ref(9, e, e - 1, *location) for e, location in zip(range(5), locations))
    offset = 0
    for entry_id, location in enumerate(locations):
        record = parse_record(records, offset, len(records))
        assert (record.kind, record.ledger_id, record.entry_id) == (ADD_REF, 9, entry_id)
        assert (record.reference.log_id, record.reference.offset, record.reference.length) == location
        offset = record.end
    assert offset == len(records)


class FadviseSpy:
    def __init__(self, monkeypatch, module) -> None:
        self.calls: list[tuple[int, int]] = []
        real = os.posix_fadvise

        def spy(fd, offset, length, advice):
            assert advice == os.POSIX_FADV_DONTNEED
            self.calls.append((offset, length))
            real(fd, offset, length, advice)
        monkeypatch.setattr(module.os, "posix_fadvise", spy)


def test_entry_log_drops_only_durable_pages_older_than_its_window(tmp_path, monkeypatch):
    spy = FadviseSpy(monkeypatch, entry_log_module)
    logger = EntryLogger(tmp_path, max_log_size=1 << 40, cache_window=MiB, direct_io=False)  # page-cache writes
    try:
        payload = os.urandom(MiB // 2)
        written = [(entry_id, logger.append_batch([(1, entry_id, payload)])[0]) for entry_id in range(3)]
        assert spy.calls == []  # nothing is durable yet
        logger.sync()
        end = 3 * (HEADER_SIZE + len(payload))
        assert spy.calls == []  # under a megabyte past the window
        written += [(entry_id, logger.append_batch([(1, entry_id, payload)])[0]) for entry_id in range(3, 8)]
        assert spy.calls == []  # appended, not durable: never dropped
        logger.sync()
        end = 8 * (HEADER_SIZE + len(payload))
        assert spy.calls == [(0, (end - MiB) & ~4095)]
        assert all(logger.read(location, 1, entry_id) == payload for entry_id, location in written)
    finally:
        logger.close()


def test_journal_drops_its_fsynced_pages(open_storage, monkeypatch):
    spy = FadviseSpy(monkeypatch, journal_module)
    storage = open_storage(journal_write_data=True)
    big = [add_op(1, entry_id) for entry_id in range(2000)]  # bodies of 100..2100 bytes: over a megabyte
    for first in range(0, len(big), 500):
        assert storage.add_entries(big[first:first + 500]).result(30) == [pb.OK] * 500
    assert spy.calls and spy.calls[0][0] == 0
    assert all(prev[0] + prev[1] == nxt[0] for prev, nxt in zip(spy.calls, spy.calls[1:]))
    assert all(length % 4096 == 0 for _, length in spy.calls)
    assert [storage.read_entry(1, e) for e in range(2000)] == [op.body for op in big]


def test_malloc_thresholds_are_raised_unless_the_environment_chose_them():
    code = "from bookie_server.memory import keep_freed_memory; print(keep_freed_memory())"
    env = {key: value for key, value in os.environ.items() if key != "GLIBC_TUNABLES" and not key.startswith("MALLOC_")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    outputs = [subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True,
                              check=True, timeout=60).stdout.strip()
               for extra in ({}, {"MALLOC_TRIM_THRESHOLD_": "1000"})]
    assert outputs == ["True", "False"]
