"""Garbage collection inside the storage engine: delete ledgers, delete dead entry logs, compact sparse ones.

The collector thread (``gc.py``) decides *which* ledgers are garbage; this
module makes the deletions, in an order that a kill -9 at any point cannot
turn into a failed start-up or a broken ledger.

Deleting a ledger (``delete_ledgers``) is done in memory at once: its state
record goes (reads answer NO_SUCH_LEDGER), its cached index pages go, and
its index file is from then on ignored ("discarded", see ``index.py``). The
deletion is stamped with the journal's submission count: every record the
ledger ever had was submitted before it. The checkpoint that follows
persists a state snapshot without the ledger; the first checkpoint whose
mark covers that stamp (``Journal.durable_position``) also unlinks the
index file, after the mark is persisted. Until then a crash brings the
ledger back whole (the snapshot, index file and journal that still have
it) or, once a snapshot without it is persisted, leaves it out (its
remaining journal records are skipped as orphans, or re-create all of it
if its key record is among them); the next passes collect it again. After
the unlink, replay starts past every record of the ledger, and an index
file left by a crash between the mark and the unlink is deleted at start
(``LedgerIndex.remove_orphan_files``). A zombie writer
adding to a deleted ledger creates it again (a new, empty ledger, never
reading the stale file); it is collected like any other.

Deleting an entry log (``reclaim_entry_logs``). Replay of an ADD_REF record
reads the entry log it names; a missing log stops start-up. So a log L is
deleted only when
  1. L is not the newest log (so it is sealed: nothing is appended to it,
     and every journal record naming L was submitted before now);
  2. every ledger with entries in L is gone: deleted, and its deletion made
     durable as above (index file unlinked), so neither the snapshot, nor
     an index file, nor replay can point into L again;
  3. after 1 held, the journal was flushed (every record submitted so far is
     fsync'd, ``Journal.flush``) and then a checkpoint completed: its mark
     is past every record naming L, so replay never reads L again. Records
     still queued when a mark is taken are exactly what the flush rules out.
A crash between deleting two logs leaves the others for the next pass.

Sealing the current log early (``rotate_current_log``). Rules 1-3 take
sealed logs only, so the collector first seals the current log when
``gc_rules.rotation_due`` says the sealed-log rules would take it at once
(no live ledger, or a live share below the compaction threshold, and at
least 16 MiB of entries). Under the storage lock, the logger creates the
next log and persists the old one's map: from then on no add goes to the
old log, and every journal record naming it was submitted before the
rotation, so rules 1-3 apply to it unchanged (the same pass's
``reclaim_entry_logs`` flushes, checkpoints, and only then deletes). A crash
after the rotation leaves a sealed log and an empty newest one: the old log
is collected by a later pass, the empty one once a newer log exists.
The journal holds copies too (small bodies are written into it): the flush
of each such step also starts a new journal file when the current one holds
16 MiB or more, so the checkpoint deletes the old file as soon as its mark is
past it (as it deletes every file wholly before the mark).

Compaction (``compact_entry_logs``). A sealed log whose live share is below
the threshold has each live entry (its ledger alive, its index slot still
pointing at this copy) appended to the current log and re-indexed, under
the storage lock, a few MiB at a time. Then the same flush + checkpoint
makes the copies durable (entry logs fsync'd before the index pages that
point at them) and moves the mark past every record naming the old log,
which only then is deleted. A crash before that leaves the old log and the
old index pages in charge; the copies are dead bytes of the newer log.

Reads that found an entry's location just before its log went may fail
with an error (an unknown to the client, which reads another replica);
they never return wrong bytes (every read checks ids and checksum).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable

from bookie_server.checkpoint import Checkpointer, crash_point
from bookie_server.entry_log import EntryLocation, EntryLogger
from bookie_server.entry_log_usage import EntryLogScan, LogRecord
from bookie_server.gc_rules import (ROTATE_MIN_BYTES, deletable_logs, live_fraction, logs_to_compact,
                                     rotation_due)
from bookie_server.index import LedgerIndex
from bookie_server.journal import Journal
from bookie_server.ledger_state import LedgerStates
from pyspark_ledger.errors import StorageError

log = logging.getLogger(__name__)
FLUSH_TIMEOUT_S = 120.0
COPY_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass
class GcOutcome:
    """What one call reclaimed."""

    logs_deleted: list[int] = field(default_factory=list)
    bytes_reclaimed: int = 0
    logs_compacted: list[int] = field(default_factory=list)
    entries_copied: int = 0


class StorageGc:
    """The storage engine's garbage collection steps; every method takes the storage lock itself."""

    def __init__(self, *, lock: threading.Lock, states: LedgerStates, index: LedgerIndex, entry_log: EntryLogger,
                 journal: Journal, checkpointer: Checkpointer, refusal: Callable[[], StorageError | None],
                 fail: Callable[[Exception], None]) -> None:
        self._lock = lock
        self._states = states
        self._index = index
        self._entry_log = entry_log
        self._journal = journal
        self._checkpointer = checkpointer
        self._refusal = refusal
        self._fail = fail

    def delete_ledgers(self, ledger_ids: Iterable[int], written_before: float | None = None) -> list[int]:
        """Delete the ledgers this bookie has (in memory; durable at the next checkpoint); return them. With
        ``written_before``, those with an entry stored at or after that monotonic time are kept (checked
        under the lock, so an add racing the deletion keeps its ledger)."""
        with self._lock:
            self._check_usable()
            sequence = self._journal.submitted
            wanted = sorted(set(ledger_ids))
            if written_before is not None:
                records = [(ledger_id, self._states.get(ledger_id)) for ledger_id in wanted]
                wanted = [ledger_id for ledger_id, record in records
                          if record is not None and record.written_at < written_before]
            deleted = [ledger_id for ledger_id in wanted if self._states.remove(ledger_id)]
            self._index.discard(deleted, sequence)
        crash_point("gc_after_ledgers_deleted")
        return deleted

    def reclaim_entry_logs(self) -> GcOutcome:
        """Make pending deletions durable and delete every entry log left with no live ledger."""
        outcome = GcOutcome()
        with self._lock:
            self._check_usable()
            maybe = deletable_logs(self._entry_log.usage(), self._not_alive)
            pending = any(self._states.get(ledger_id) is None for ledger_id in self._index.discarded)
        if not maybe and not pending:
            return outcome
        self._make_durable()
        with self._lock:
            todo = [log_id for log_id in deletable_logs(self._entry_log.usage(), self._gone) if log_id in maybe]
        for log_id in todo:
            self._remove_log(log_id, outcome)
        return outcome

    def rotate_current_log(self, threshold: float, min_bytes: int = ROTATE_MIN_BYTES) -> int | None:
        """Seal the current log if, sealed, it would be deleted or compacted (``rotation_due``); return its id."""
        with self._lock:
            self._check_usable()
            current = self._entry_log.current_log_id
            usage = self._entry_log.usage().get(current) if current is not None else None
            if not rotation_due(usage, self._alive, threshold, min_bytes):
                return None
            total, live = usage.total_bytes, live_fraction(usage, self._alive)
            try:
                sealed = self._entry_log.rotate()
            except OSError as exc:  # nothing changed: the old log stays current
                raise StorageError(f"cannot start a new entry log to seal {self._entry_log.path(current)}: "
                                   f"{exc}") from exc
        log.info("garbage collection: sealed entry log %d early (%d bytes of entries, %.1f%% of them live) to "
                 "collect it", sealed, total, live * 100)
        crash_point("gc_after_rotation")
        return sealed

    def compact_entry_logs(self, threshold: float) -> GcOutcome:
        """Move the live entries out of every sealed log whose live share is below ``threshold``, then delete it."""
        outcome = GcOutcome()
        with self._lock:
            self._check_usable()
            todo = logs_to_compact(self._entry_log.usage(), self._alive, threshold)
        for log_id in todo:
            if self._copy_live_entries(log_id, outcome):
                crash_point("compaction_after_copy")
                self._make_durable()
                crash_point("compaction_before_log_delete")
                self._remove_log(log_id, outcome)
                outcome.logs_compacted.append(log_id)
        return outcome

    # --- steps ---------------------------------------------------------------------------

    def _make_durable(self) -> None:
        """Flush the journal (nothing submitted before now is left queued), then run a checkpoint. A journal file
        of 16 MiB or more is closed by the flush, so the checkpoint deletes it with the copies of deleted
        ledgers' entries it holds (bodies up to ``journal_inline_max_bytes`` are copied into the journal)."""
        if not self._journal.flush(FLUSH_TIMEOUT_S, new_file_at=ROTATE_MIN_BYTES):
            raise StorageError(f"the journal did not flush within {FLUSH_TIMEOUT_S:.0f} s or has failed "
                               f"({self._journal.failure}); garbage collection waits for the next pass")
        self._checkpointer.checkpoint()
        if self._checkpointer.mark_held_back:  # replay may still read what a deletion would remove
            raise StorageError(f"the journal mark is held back by ledgers whose index pages are not durable "
                               f"({sorted(self._checkpointer.pinned)}); garbage collection waits")

    def _remove_log(self, log_id: int, outcome: GcOutcome) -> None:
        crash_point("gc_before_entry_log_delete")
        with self._lock:
            try:
                outcome.bytes_reclaimed += self._entry_log.remove_log(log_id)
            except OSError as exc:
                raise StorageError(f"cannot delete entry log {self._entry_log.path(log_id)}: {exc}") from exc
        outcome.logs_deleted.append(log_id)
        crash_point("gc_after_entry_log_delete")

    def _copy_live_entries(self, log_id: int, outcome: GcOutcome) -> bool:
        """Copy the log's live entries to the current log; False (log pinned) if the log is damaged."""
        with self._lock:
            alive = self._states.ids()  # a pre-filter: _move checks again under the lock
        scan = EntryLogScan(self._entry_log.path(log_id))
        chunk: list[LogRecord] = []
        chunk_bytes = 0
        for record in scan.records():
            if record.ledger_id not in alive:
                continue
            chunk.append(record)
            chunk_bytes += record.length
            if chunk_bytes >= COPY_CHUNK_BYTES:
                outcome.entries_copied += self._move(log_id, chunk)
                chunk, chunk_bytes = [], 0
        outcome.entries_copied += self._move(log_id, chunk)
        if scan.damage is None:
            return True
        log.error("compaction: %s", scan.damage)
        with self._lock:
            usage = self._entry_log.usage().get(log_id)
            if usage is not None:
                usage.pinned = scan.damage
        return False

    def _move(self, log_id: int, records: list[LogRecord]) -> int:
        with self._lock:
            self._check_usable()
            keep = [record for record in records if self._states.get(record.ledger_id) is not None
                    and self._index.get(record.ledger_id, record.entry_id)
                    == EntryLocation(log_id, record.offset, record.length)]
            if not keep:
                return 0
            try:
                locations = self._entry_log.append_batch([(r.ledger_id, r.entry_id, r.body) for r in keep])
            except OSError as exc:  # the current log's tail is in doubt: the storage stops taking adds
                self._fail(exc)
                raise StorageError(f"compaction of entry log {log_id} could not append: {exc}") from exc
            for record, location in zip(keep, locations):
                self._index.put(record.ledger_id, record.entry_id, location)
            if self._index.over_capacity:
                self._checkpointer.request()
        return len(keep)

    # --- predicates (storage lock held) --------------------------------------------------

    def _check_usable(self) -> None:
        refusal = self._refusal()
        if refusal is not None:
            raise StorageError(f"no garbage collection: {refusal}")

    def _alive(self, ledger_id: int) -> bool:
        return self._states.get(ledger_id) is not None

    def _not_alive(self, ledger_id: int) -> bool:
        return self._states.get(ledger_id) is None

    def _gone(self, ledger_id: int) -> bool:
        """Deleted and the deletion durable (its index file removed)."""
        return self._states.get(ledger_id) is None and ledger_id not in self._index.discarded
