"""Applies replayed journal records to the ledger state, entry logs and index, in batches.

An ADD record carries the entry's body: if the entry logs already hold it,
intact, it is indexed where it is (``replay_in_place``: the rule and why it
is safe are there); else it is appended to the entry log again and indexed
there. An ADD_REF record names where the body already is
(its entry log was fsync'd before the record was written): the record there
is read back and checked (ids, length, checksum), then indexed in place.
A reference to missing or damaged entry-log data is corruption: replay stops
with ``JournalCorruptError`` unless ``skip_corruption`` (then the entry is
left out and logged).

An entry whose ledger's index cannot take it (its index file is damaged
where the page must be loaded) is left out by ``index``/``store`` and that
ledger is failed alone; the storage then keeps the journal mark from moving
past it (``Checkpointer.pin``), so the entry is replayed again at the next
start rather than lost.

Replay is idempotent: a ledger key for a known ledger changes nothing, a fence
of a fenced ledger changes nothing, and a re-added entry's index slot points
to its newest copy (LAC and last entry only grow). Records are applied in
journal order: a batch of one kind is flushed before a record of the other.

``known_ledger`` decides, after the replay, which index files belong to no
known ledger (orphans, removed: of deleted ledgers, or of ledgers that never
had a durable record) and refuses to start when the ledger state snapshot was
lost (``snapshot_lost``; docs/protocol.md B6).
"""
from __future__ import annotations

import logging
import struct
import time
from pathlib import Path
from typing import Callable, Sequence

from bookie_server.checkpoint import crash_point
from bookie_server.entry_log import EntryLocation
from bookie_server.journal_format import ADD, ADD_REF, FENCE, LEDGER_KEY, JournalRecord
from bookie_server.journal import JournalMark, journal_files
from bookie_server.journal_replay import FIRST_FILE_ID, HOW_TO_SKIP, NO_MARK, ReplayResult, replay_journal
from bookie_server.replay_hint import read_hint
from bookie_server.replay_in_place import InPlaceMatcher
from bookie_server.ledger_state import LedgerStates
from bookie_server.storage_requests import StoredEntry
from pyspark_ledger.entry import HEADER_SIZE as ENTRY_HEADER_SIZE
from pyspark_ledger.entry import peek_header
from pyspark_ledger.errors import (CorruptEntryError, CorruptStorageError, InternalError, JournalCorruptError,
                                   StorageError)

log = logging.getLogger(__name__)

BATCH_RECORDS = 1024
_PREFIX_LAC = struct.Struct(">4s16xq")  # an entry's magic, version and digest type; its LAC
_FAST_MIN_BODY = ENTRY_HEADER_SIZE + 32  # the largest digest (HMAC-SHA256), as in storage_requests
_GOOD_PREFIXES: set[bytes] = set()
BATCH_BYTES = 16 * 1024 * 1024

Store = Callable[[list[StoredEntry]], object]
Index = Callable[[list[StoredEntry], Sequence[EntryLocation]], None]
Check = Callable[[EntryLocation, int, int], object]


class ReplayApplier:
    """Feed it records with ``apply``; call ``flush`` at the end.

    ``store(entries)`` appends and indexes bodies; ``index(entries, locations)`` indexes entries already in
    an entry log; ``check(location, ledger_id, entry_id)`` reads one back, raising StorageError if it is
    missing or damaged."""

    def __init__(self, states: LedgerStates, store: Store, index: Index | None = None, check: Check | None = None,
                 skip_corruption: bool = False, matcher: InPlaceMatcher | None = None) -> None:
        self._states = states
        self._matcher = matcher
        self._store = store
        self._index = index
        self._check = check
        self._skip_corruption = skip_corruption
        self._batch: list[tuple] = []  # StoredEntry-shaped
        self._locations: list[EntryLocation] = []
        self._batch_kind = ADD
        self._batch_bytes = 0
        self.orphan_adds = 0
        self.lost_entries = 0

    def apply(self, record: JournalRecord) -> None:
        if record.kind == ADD:
            self.apply_add(record.ledger_id, record.entry_id, record.data)
            return
        if record.kind == ADD_REF:
            self._add(record)
            return
        ledger = self._states.get(record.ledger_id)
        if ledger is None:
            ledger = self._states.create(record.ledger_id, record.data)
        if record.kind == FENCE:
            self._states.fence(ledger)
        elif record.kind != LEDGER_KEY:  # pragma: no cover - parse_record only yields known kinds
            raise InternalError(f"unknown journal record kind {record.kind}")

    def flush(self) -> None:
        if not self._batch:
            return
        if self._batch_kind == ADD:
            self._store(self._batch)
        else:
            self._index(self._batch, self._locations)
        self._batch, self._locations, self._batch_bytes = [], [], 0
        crash_point("replay_after_a_batch")

    def apply_add(self, ledger_id: int, entry_id: int, body) -> None:
        """An ADD record's entry (``body`` may be a view of a buffer that is reused after the call)."""
        ledger = self._states.get(ledger_id)
        if ledger is None:
            self._orphan(ledger_id, entry_id)
            return
        location = self._matcher.match(ledger_id, entry_id, body) if self._matcher is not None else None
        kind = ADD if location is None else ADD_REF  # ADD_REF: indexed where it is, like a reference
        if kind != self._batch_kind:
            self.flush()
            self._batch_kind = kind
        if len(body) >= _FAST_MIN_BODY and (fast := _PREFIX_LAC.unpack_from(body))[0] in _GOOD_PREFIXES:
            lac = fast[1]  # _last_add_confirmed's first branch, inline (once per replayed record)
        else:
            lac = _last_add_confirmed(body)
        if location is None:  # plain StoredEntry-shaped tuples: EntryPlacer takes them (cheaper to build)
            self._batch.append((ledger, ledger_id, entry_id, bytes(body), lac))
            self._batch_bytes += len(body)
        else:
            self._batch.append((ledger, ledger_id, entry_id, b"", lac))
            self._locations.append(location)
            self._batch_bytes += location[2]  # its length (a plain tuple, see InPlaceMatcher.match)
        if len(self._batch) >= BATCH_RECORDS or self._batch_bytes >= BATCH_BYTES:
            self.flush()

    def _orphan(self, ledger_id: int, entry_id: int) -> None:
        self.orphan_adds += 1  # its key record was lost to skipped corruption: nobody could authenticate
        log.warning("journal replay: skipping entry %d of ledger %d, whose ledger key record is missing",
                    entry_id, ledger_id)

    def _add(self, record: JournalRecord) -> None:
        """An ADD_REF record: its entry is indexed where the record says, once checked."""
        ledger = self._states.get(record.ledger_id)
        if ledger is None:
            self._orphan(record.ledger_id, record.entry_id)
            return
        if record.kind != self._batch_kind:
            self.flush()
            self._batch_kind = record.kind
        if self._referenced(record):
            ref = record.reference
            self._batch.append(StoredEntry(ledger, record.ledger_id, record.entry_id, b"", ref.last_add_confirmed))
            self._locations.append(EntryLocation(ref.log_id, ref.offset, ref.length))
            self._batch_bytes += ref.length
        if len(self._batch) >= BATCH_RECORDS or self._batch_bytes >= BATCH_BYTES:
            self.flush()

    def _referenced(self, record: JournalRecord) -> bool:
        """True if the entry log holds the referenced entry intact; else corruption (raised or skipped)."""
        ref = record.reference
        try:
            self._check(EntryLocation(ref.log_id, ref.offset, ref.length), record.ledger_id, record.entry_id)
            return True
        except StorageError as exc:
            message = (f"the journal names ledger {record.ledger_id} entry {record.entry_id} in entry log "
                       f"{ref.log_id} at offset {ref.offset}, but that record is missing or damaged ({exc})")
            if not self._skip_corruption:
                raise JournalCorruptError(f"{message}. {HOW_TO_SKIP}") from exc
            self.lost_entries += 1
            log.error("%s; skipping it because skip_journal_corruption is set (the entry is lost)", message)
            return False


def _last_add_confirmed(body) -> int:
    """The LAC in an entry's header (``peek_header``'s, read at once from a long body whose first 4 bytes were
    already accepted by it), -1 if the header is malformed (validated when added; readers verify the bytes)."""
    if len(body) >= _FAST_MIN_BODY:
        prefix, lac = _PREFIX_LAC.unpack_from(body)
        if prefix in _GOOD_PREFIXES:
            return lac
    try:
        lac = peek_header(body).last_add_confirmed
    except CorruptEntryError:
        return -1
    if len(body) >= _FAST_MIN_BODY:
        _GOOD_PREFIXES.add(prefix)  # magic, version and digest type: peek_header accepts any such long body
    return lac


def snapshot_lost(snapshot_missing: bool, start_mark: JournalMark, journal_ids: Sequence[int],
                  replay_skipped: bool = False) -> bool:
    """Whether a missing state snapshot means lost state (docs/protocol.md B6). A checkpoint writes the snapshot
    before it persists a mark, and journal files are deleted only past a persisted mark: so with no mark and
    the journal still starting at its first file, no checkpoint ever completed and the journal holds every
    durable record; the snapshot was merely never written. Anything else (a mark, or the first journal file
    gone) means a snapshot existed and is lost -- and so does a replay that skipped damaged records
    (``replay_skipped``): the journal then no longer proves which ledgers had durable records."""
    if not snapshot_missing:
        return False
    return replay_skipped or start_mark != NO_MARK or not journal_ids or min(journal_ids) != FIRST_FILE_ID


def known_ledger(states: LedgerStates, ledger_id: int, missing_snapshot: Path | None) -> bool:
    """Whether the ledger of an index file found at start is known (else the file is an orphan to delete). An
    index file is written only by a checkpoint, which also writes the state snapshot: if the snapshot was lost
    (``missing_snapshot`` names it; ``snapshot_lost``) and the journal did not bring the ledger back, its state
    was lost, not deleted, and its data must not go."""
    if states.get(ledger_id) is not None:
        return True
    if missing_snapshot is not None:
        raise CorruptStorageError(
            f"the ledger state snapshot {missing_snapshot} is missing but ledger {ledger_id} has index files: "
            "the state of stored ledgers is lost. The bookie refuses to start rather than delete their data; "
            "restore the snapshot or the data directory from a backup, or decommission this bookie and "
            "re-replicate its ledgers")
    return False


def replay_at_open(config, start_mark, states: LedgerStates, entries, entry_log, index,
                   missing_snapshot: Path | None) -> tuple[ReplayResult, int]:
    """Replay the journal from ``start_mark`` into a storage being opened (its lock held by the caller), then
    remove index files of ledgers that are gone; the replay's result and the damage it found (regions
    skipped with ``skip_journal_corruption`` plus entries lost)."""
    started = time.monotonic()
    journal_ids = [file_id for file_id, _ in journal_files(config.journal_dir)]
    matcher = InPlaceMatcher(config.entry_log_dir, _matcher_start(config.data_dir, start_mark))
    try:
        applier = ReplayApplier(states, entries.store, entries.index, entry_log.read, config.skip_journal_corruption,
                                matcher)
        result = replay_journal(config.journal_dir, start_mark, config.skip_journal_corruption, applier.apply,
                                applier.apply_add)
        applier.flush()
    finally:
        matcher.close()
    entry_log.adopt(matcher.adopted)  # fsync'd by the next checkpoint, before the mark passes their records
    skipped = bool(result.skipped_regions or applier.lost_entries or applier.orphan_adds)
    never_written = missing_snapshot is not None and not snapshot_lost(True, start_mark, journal_ids, skipped)
    if never_written:
        missing_snapshot = None  # no checkpoint ever completed: the journal replayed holds every durable record
    orphans = index.remove_orphan_files(lambda ledger_id: known_ledger(states, ledger_id, missing_snapshot))
    log.info("bookie storage %s: replayed %d journal records from %d files in %.3f s "
             "(%d bodies found in the entry logs), removed %d index files of deleted ledgers",
             config.data_dir, result.records, result.files, time.monotonic() - started, matcher.matched, orphans)
    if never_written and orphans:
        log.warning("bookie storage %s: no checkpoint had completed (no state snapshot, no mark, the journal from "
                    "its first file): removed %d index files of ledgers without any durable journal record, "
                    "written by a checkpoint a crash ended", config.data_dir, orphans)
    return result, result.skipped_regions + applier.lost_entries


def _matcher_start(data_dir: Path, start_mark) -> tuple[int, int] | None:
    """Where the entry logs hold the first body replayed: the oldest log for a journal replayed from its start,
    else where the checkpoint that persisted the mark saw the entry log (``replay_hint``), else unknown."""
    if start_mark == NO_MARK:
        return 0, 0
    return read_hint(data_dir, start_mark)
