"""Deleted ledgers give their disk space back with the default settings (issue 14, part 5).

A real bookie with every default (1 GiB entry logs, 512 MiB journal files, compaction threshold 0.2) but a
short ``--gc-interval``: ~60 MB go to ledgers that are then deleted, while a small live ledger shares the same
entry log. The space comes back within a few GC intervals (the current log is sealed early and compacted, the
journal file holding the copies is closed and deleted); the live ledger reads back whole, also after a kill -9
at the early seal or just before the log is deleted.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from bookie_server.checkpoint import CRASH_POINT_ENV
from pyspark_ledger.client import BookieStatus, LedgerClient
from pyspark_ledger.entry import master_key

from .conftest import wait_until

GC_INTERVAL_S = 1.0
ENTRY_BYTES = 16 * 1024  # copied into the journal too (up to 64 KiB by default)
DOOMED = 3
DOOMED_ENTRIES = 1250  # per ledger: 3 x 1250 x 16 KiB = 60 MiB
KEPT_EVERY = 25  # a kept entry after every 25 doomed ones: about 4% of the log stays live
PASSWORD = b"pw"


def stored_bytes(data_dir: Path) -> int:
    """Bytes of the entry logs and the journal (what the deleted ledgers took)."""
    return sum(path.stat().st_size for sub in ("entry_logs", "journal") for path in (data_dir / sub).iterdir()
               if path.is_file())


def payload(name: str, index: int) -> bytes:
    head = f"{name} {index} ".encode()
    return (head * (ENTRY_BYTES // len(head) + 1))[:ENTRY_BYTES]


def write(ledgers: LedgerClient) -> tuple[list[int], int, int]:
    """The doomed ledgers, the kept ledger and how many entries the kept one has, interleaved in one log."""
    doomed = [ledgers.create_ledger(1, 1, 1, password=PASSWORD) for _ in range(DOOMED)]
    kept = ledgers.create_ledger(1, 1, 1, password=PASSWORD)
    futures = []
    for index in range(DOOMED_ENTRIES):
        for writer in doomed:
            futures.append(writer.append_async(payload(f"doomed {writer.ledger_id}", index)))
        if index % KEPT_EVERY == 0:
            futures.append(kept.append_async(payload("kept", index // KEPT_EVERY)))
        if len(futures) > 512:
            [future.result(60) for future in futures]
            futures = []
    [future.result(60) for future in futures]
    count = (DOOMED_ENTRIES - 1) // KEPT_EVERY + 1
    for writer in doomed + [kept]:
        writer.close()
    return [writer.ledger_id for writer in doomed], kept.ledger_id, count


def assert_kept_whole(ledgers: LedgerClient, kept: int, count: int) -> None:
    entries = [entry.data for entry in ledgers.open_ledger(kept, PASSWORD).read()]
    assert entries == [payload("kept", index) for index in range(count)]


@pytest.mark.parametrize("crash_point", [None, "gc_after_rotation", "gc_before_entry_log_delete"])
def test_deleted_ledgers_space_comes_back_with_the_default_settings(make_bookie, metadata_uri, client_for,
                                                                   crash_point):
    bookie = make_bookie("bookie", gc_interval=GC_INTERVAL_S, no_verify_new_ledgers=False)
    bookie.start(env={CRASH_POINT_ENV: crash_point} if crash_point else None)
    with LedgerClient(metadata_uri) as ledgers:
        wait_until(lambda: ledgers.bookies(), what="the bookie to register")
        doomed, kept, count = write(ledgers)
        before = stored_bytes(bookie.data_dir)
        assert before > 100 * 1024 * 1024  # the entry log and the journal both hold (nearly) the 60 MiB
        for ledger_id in doomed:
            ledgers.delete_ledger(ledger_id, PASSWORD)
        deleted_at = time.monotonic()
        if crash_point:  # killed at that step (as kill -9 would), then started again without the hook
            assert bookie.wait_exit(60) == 137
            bookie.start()
        wait_until(lambda: stored_bytes(bookie.data_dir) < 4 * 1024 * 1024, timeout=60,
                   what="the deleted ledgers' space to come back")
        intervals = (time.monotonic() - deleted_at) / GC_INTERVAL_S
        after = stored_bytes(bookie.data_dir)
        print(f"crash point {crash_point}: {before} bytes before, {after} after, {intervals:.1f} GC intervals")
        if crash_point is None:
            assert intervals < 5  # the two-pass rule needs two passes; then one pass seals, compacts, deletes
        log_text = (bookie.data_dir / "bookie-stderr.log").read_text()
        assert "sealed entry log 1 early" in log_text
        assert_kept_whole(ledgers, kept, count)
        client = client_for(bookie)
        for ledger_id in doomed:
            assert client.read(ledger_id, 0, master_key=master_key(PASSWORD)).status == BookieStatus.NO_SUCH_LEDGER
        bookie.kill()  # kill -9 after it all: the kept ledger is still whole, the space still free
        bookie.start()
        assert_kept_whole(ledgers, kept, count)
        assert stored_bytes(bookie.data_dir) < 4 * 1024 * 1024
