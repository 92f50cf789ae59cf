"""Deterministic test entries for the storage tests (shared by the tests and the child process)."""
from __future__ import annotations

import hashlib
import os

from bookie_server.storage import AddOp
from pyspark_ledger.entry import EntryCodec, master_key

KEY = master_key(b"storage-test-password")
OTHER_KEY = master_key(b"someone-else")
CODEC = EntryCodec()


def payload(ledger_id: int, entry_id: int) -> bytes:
    """100..2100 bytes that depend on the ledger and entry ids."""
    seed = hashlib.sha256(f"{ledger_id}/{entry_id}".encode()).digest()
    return seed * (3 + (seed[0] * 256 + seed[1]) % 64)


def body(ledger_id: int, entry_id: int, lac: int | None = None) -> bytes:
    lac = entry_id - 1 if lac is None else lac
    return CODEC.encode(ledger_id, entry_id, lac, 0, payload(ledger_id, entry_id))


def add_op(ledger_id: int, entry_id: int, key: bytes = KEY, *, lac: int | None = None,
           recovery: bool = False) -> AddOp:
    return AddOp(ledger_id, entry_id, key, body(ledger_id, entry_id, lac), recovery)


JOURNAL_MODE_ENV = "TEST_BOOKIE_JOURNAL_MODE"
#: The journal modes every crash and GC test runs in: its StorageConfig settings.
JOURNAL_MODES = {
    # bodies only in entry logs, written around the page cache (docs/protocol.md B9: each sync writes them out)
    "references": {"journal_write_data": False, "journal_inline_max_bytes": 0, "entry_log_direct_io": True},
    "bodies": {"journal_write_data": True},                                         # every body in the journal
    "mixed": {"journal_write_data": False, "journal_inline_max_bytes": 1000},      # the default's split, with
}                                                                                   # the test payloads' sizes


#: Set (to anything) for storages and child processes whose entry logs are written through the page cache, or
#: around it (``StorageConfig.entry_log_direct_io``).
BUFFERED_ENTRY_LOGS_ENV = "TEST_BOOKIE_BUFFERED_ENTRY_LOGS"
DIRECT_ENTRY_LOGS_ENV = "TEST_BOOKIE_DIRECT_ENTRY_LOGS"


def journal_settings_from_env() -> dict:
    """The journal settings of storages opened by a test and its child processes (set by ``journal_mode``), and
    ``entry_log_direct_io`` on or off when ``DIRECT_ENTRY_LOGS_ENV`` or ``BUFFERED_ENTRY_LOGS_ENV`` is set."""
    settings = dict(JOURNAL_MODES.get(os.environ.get(JOURNAL_MODE_ENV, ""), {}))
    if os.environ.get(DIRECT_ENTRY_LOGS_ENV):
        settings["entry_log_direct_io"] = True
    if os.environ.get(BUFFERED_ENTRY_LOGS_ENV):
        settings["entry_log_direct_io"] = False
    return settings
