"""Placing stored entries: append their bodies to the entry log, point the index at them, update the
ledgers' state and wake the long polls of ledgers whose LAC moved.

The storage's add path and its journal replay both go through ``EntryPlacer``,
always with the storage's lock held. An entry whose ledger's index fails (its
page cannot be loaded) is left out and its ledger failed alone
(``LedgerIndex.fail``): the (ledger, entry) ids left out are returned, and the
caller answers those adds IO_ERROR (or, in replay, keeps the journal mark from
passing them).
"""
from __future__ import annotations

import operator
import time
from typing import Callable, Sequence

from bookie_server.entry_log import EntryLocation, EntryLogger
from bookie_server.index import LedgerIndex
from bookie_server.ledger_state import LedgerStates
from bookie_server.storage_lac import LacBoard
from pyspark_ledger.errors import StorageError

_IDS_AND_BODY = operator.itemgetter(1, 2, 3)  # of a StoredEntry-shaped tuple


class EntryPlacer:
    """Stores (StoredEntry-shaped) entries into ``entry_log``, ``index`` and ``states`` (see the module docstring);
    ``index_full()`` is called when the index holds more pages than its cache should (a checkpoint is due)."""

    def __init__(self, entry_log: EntryLogger, index: LedgerIndex, states: LedgerStates, lacs: LacBoard,
                 index_full: Callable[[], None]) -> None:
        self._entry_log, self._index, self._states, self._lacs = entry_log, index, states, lacs
        self._index_full = index_full

    def store(self, entries: Sequence[tuple],
              referenced: bool = False) -> tuple[list[EntryLocation], set[tuple[int, int]]]:
        """Append the entries to the entry log and index them; their locations and the (ledger, entry) ids
        that could not be indexed. ``referenced``: some of their bodies are in no journal record, so the entry
        log's sync before the group commit will wait for them (``EntryLogger.append_batch``'s ``writeback``)."""
        locations = self._entry_log.append_batch(map(_IDS_AND_BODY, entries), writeback=referenced)
        return locations, self.index(entries, locations)

    def index(self, entries: Sequence[tuple], locations: Sequence[EntryLocation]) -> set[tuple[int, int]]:
        """Point the index at entries already in the entry log and update ledger state; the (ledger, entry) ids
        left out because their ledger's index failed."""
        advanced = set()
        put, record_entry = self._index.put, self._states.record_entry
        now = time.monotonic()
        failed: set[tuple[int, int]] = set()
        items = zip(entries, locations)
        while True:
            try:
                for (record, ledger_id, entry_id, _, lac), location in items:
                    put(ledger_id, entry_id, location)
                    record.written_at = now
                    if record_entry(record, entry_id, lac):
                        advanced.add(ledger_id)
                break
            except StorageError as exc:  # this ledger's alone; the loop goes on with the next entry
                failed.add((ledger_id, entry_id))
                self._index.fail(ledger_id, f"cannot index entry {entry_id}: {exc}")
        if advanced:
            self._lacs.advanced(advanced)
        if self._index.over_capacity:
            self._index_full()
        return failed
