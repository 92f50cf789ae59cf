"""Applies replayed journal records to the ledger state, entry logs and index, in batches.

Replay is idempotent: a ledger key for a known ledger changes nothing, a fence
of a fenced ledger changes nothing, and a re-added entry is appended again
and its index slot points to the new copy (LAC and last entry only grow).
"""
from __future__ import annotations

import logging
from typing import Callable

from bookie_server.journal_format import ADD, FENCE, LEDGER_KEY, JournalRecord
from bookie_server.ledger_state import LedgerStates
from bookie_server.storage_requests import StoredEntry
from pyspark_ledger.entry import peek_header
from pyspark_ledger.errors import CorruptEntryError

log = logging.getLogger(__name__)

BATCH_RECORDS = 1024
BATCH_BYTES = 16 * 1024 * 1024


class ReplayApplier:
    """Feed it records with ``apply``; call ``flush`` at the end."""

    def __init__(self, states: LedgerStates, store: Callable[[list[StoredEntry]], None]) -> None:
        self._states = states
        self._store = store
        self._batch: list[StoredEntry] = []
        self._batch_bytes = 0
        self.orphan_adds = 0

    def apply(self, record: JournalRecord) -> None:
        if record.kind == ADD:
            self._add(record)
            return
        ledger = self._states.get(record.ledger_id)
        if ledger is None:
            ledger = self._states.create(record.ledger_id, record.data)
        if record.kind == FENCE:
            self._states.fence(ledger)
        elif record.kind != LEDGER_KEY:  # pragma: no cover - parse_record only yields known kinds
            raise AssertionError(f"unknown journal record kind {record.kind}")

    def flush(self) -> None:
        if self._batch:
            self._store(self._batch)
            self._batch, self._batch_bytes = [], 0

    def _add(self, record: JournalRecord) -> None:
        ledger = self._states.get(record.ledger_id)
        if ledger is None:  # its key record was lost to skipped corruption: nobody could authenticate
            self.orphan_adds += 1
            log.warning("journal replay: skipping entry %d of ledger %d, whose ledger key record is missing",
                        record.entry_id, record.ledger_id)
            return
        try:
            last_add_confirmed = peek_header(record.data).last_add_confirmed
        except CorruptEntryError:  # validated when added; keep the bytes, readers verify them
            last_add_confirmed = -1
        self._batch.append(StoredEntry(ledger, record.ledger_id, record.entry_id, record.data, last_add_confirmed))
        self._batch_bytes += len(record.data)
        if len(self._batch) >= BATCH_RECORDS or self._batch_bytes >= BATCH_BYTES:
            self.flush()
