"""The bookie's storage engine façade: adds, fences, reads and long polls over journal + entry logs + index.

Write path (``add_entries``): validate the batch without the lock; under one
lock check keys and fencing, append the batch's bodies to the entry log with
one write, update the index and ledger state, and submit the batch's journal
records as one submission; the future resolves once the journal has
fsync'd them (a batch of inline records given to an idle journal is written
and fsync'd by the calling thread itself, after the lock: ``Journal.lead``).
The records are ADD records carrying the bodies (all of
them with ``journal_write_data``; by default those up to
``journal_inline_max_bytes``) or ADD_REF records naming where a larger body
is in the entry log: the journal thread then fsyncs the entry logs before it
writes the group commit holding them, so a reference never points at data
that is not durable. A group of ADD records alone needs one fsync; the
entry logs they were also appended to are fsync'd by the next checkpoint,
before the replay mark moves past them. Entries are readable as soon as they are stored; the add is
acknowledged (OK) only once durable.

Failure policy: if the journal, the entry log or a checkpoint fails, the
storage stops taking adds and fences (they answer IO_ERROR, see ``failure``)
but keeps serving reads; a restart replays the journal from the last mark.
One ledger's index failure (its file damaged where a page must be loaded to
write into it, or its pages cannot be written at a checkpoint) is that
ledger's alone: its adds answer IO_ERROR (``LedgerIndex.failed``), reads of
entries whose slot cannot be read raise CorruptStorageError or StorageError,
every other ledger goes on, and the checkpointer keeps the journal mark from
passing its records that are not durable in the index (``Checkpointer.pin``).
``index_failures`` counts them for the metrics.

Garbage collection (``delete_ledgers``, ``rotate_entry_log``, ``reclaim_entry_logs``,
``compact_entry_logs``; the crash-safety design is in ``storage_gc``) is
driven by the bookie's collector thread (``gc.py``).

Parts in their own modules: checking and admitting adds (``storage_requests``),
placing entries in the entry log and the index (``storage_entries``), LAC long
polls and explicit LACs (``storage_lac``), journal replay (``storage_replay``).
"""
from __future__ import annotations

import concurrent.futures
import hmac
import logging
import shutil
import threading
from typing import Callable, Sequence

from bookie_server.checkpoint import Checkpointer, read_mark
from bookie_server.entry_log import EntryLogger
from bookie_server.files import make_dirs, make_private_dir, unlock_directory
from bookie_server.gc_rules import ROTATE_MIN_BYTES
from bookie_server.index import LedgerIndex
from bookie_server.journal import LEAD, Journal, Lead
from bookie_server.journal_format import encode_add, encode_add_refs, encode_fence
from bookie_server.ledger_state import LedgerStates
from bookie_server.storage_config import LEDGER_SNAPSHOT_NAME, MARK_FILE_NAME, StorageConfig, lock_data_dir
from bookie_server.storage_entries import EntryPlacer
from bookie_server.storage_gc import GcOutcome, StorageGc
from bookie_server.storage_lac import LacBoard
from bookie_server.storage_requests import (AddOp, AdmittedBatch, LedgerView, admit_batch, checked_lac, completion,
                                            drop_unindexed, refuse_failed_ledgers, running_future, valid_key,
                                            valid_ledger_id)
from bookie_server.replay_hint import DurableLogEnd
from bookie_server.storage_replay import replay_at_open
from pyspark_ledger.errors import (CorruptStorageError, InvalidArgumentError, NoSuchEntryError,
                                   NoSuchLedgerError, StorageError, UnauthorizedError)
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

__all__ = ["AddOp", "BookieStorage", "GcOutcome", "LedgerView", "StorageConfig"]

log = logging.getLogger(__name__)


class BookieStorage:
    """A bookie's durable store of ledger entries in one data directory (see the module docstring)."""

    on_failure: Callable[[], None] | None = None  # called when storing entries fails (storage lock held: be quick)

    def __init__(self, config: StorageConfig,
                 on_journal_sync: Callable[[int, int, float], None] | None = None) -> None:
        """Open (creating directories), replay the journal from the last mark, start the journal and
        checkpoint threads. Raises JournalCorruptError on corruption before the journal's tail, StorageError
        if the directory is in use or unusable. ``on_journal_sync(records, bytes, fsync_seconds)`` is called
        on the journal thread after each group commit."""
        if not isinstance(config, StorageConfig):
            raise InvalidArgumentError(f"BookieStorage needs a StorageConfig, got {type(config).__name__}")
        self._config = config
        self._lock = threading.Lock()
        self._lacs: LacBoard | None = None  # long polls and explicit LACs, once the ledger states are loaded
        self._closed = False
        self._store_failure: StorageError | None = None
        self._read_only_reason: str | None = None
        self._damage_at_start = 0
        self._durable_end = DurableLogEnd()  # for the replay hint of checkpoints
        self._lock_fd = self._entry_log = self._journal = self._checkpointer = None
        try:
            self._open(on_journal_sync)
        except BaseException as exc:
            self._release()
            if isinstance(exc, OSError):
                raise StorageError(f"cannot open bookie storage in {config.data_dir}: {exc}") from exc
            raise

    def _open(self, on_journal_sync: Callable[[int, int, float], None] | None) -> None:
        config = self._config
        for directory in (config.data_dir, config.journal_dir):  # private: entries, keys (owner only)
            make_private_dir(directory)
        for directory in (config.entry_log_dir, config.index_dir):
            make_dirs(directory)
        self._lock_fd = lock_data_dir(config)
        snapshot_path = config.data_dir / LEDGER_SNAPSHOT_NAME
        snapshot_missing = not snapshot_path.exists()
        self._states = LedgerStates.load(snapshot_path)
        self._entry_log = EntryLogger(config.entry_log_dir, config.entry_log_size,
                                      preallocate_bytes=config.entry_log_preallocate_bytes,
                                      direct_io=config.entry_log_direct_io)
        self._index = LedgerIndex(config.index_dir, config.index_cache_bytes, self._states.index_pages)
        self._states.index_pages = {}  # the index keeps them from here on
        self._lacs = LacBoard(self._lock, self._states)
        self._entries = EntryPlacer(self._entry_log, self._index, self._states, self._lacs, self._index_full)
        start_mark = read_mark(config.data_dir / MARK_FILE_NAME)
        with self._lock:
            result, self._damage_at_start = replay_at_open(config, start_mark, self._states, self._entries,
                                                           self._entry_log, self._index,
                                                           snapshot_path if snapshot_missing else None)
        # bodies up to this size travel in the journal (all of them with journal_write_data)
        self._inline_max = float("inf") if config.journal_write_data else config.journal_inline_max_bytes
        self._journal = Journal(config, result.next_file_id, on_journal_sync,
                                None if config.journal_write_data else self._entry_log.sync)
        self._checkpointer = Checkpointer(
            mark_path=config.data_dir / MARK_FILE_NAME, snapshot_path=config.data_dir / LEDGER_SNAPSHOT_NAME,
            journal=self._journal, entry_logger=self._entry_log, index=self._index, states=self._states,
            lock=self._lock, interval_s=config.checkpoint_interval_s, initial_mark=start_mark,
            hint_position=self._durable_end.get, snapshot_exists=not snapshot_missing)
        for ledger_id in self._index.failed:  # replayed entries it could not index may have been acknowledged
            self._checkpointer.pin(ledger_id)
        self._checkpointer.start()
        self._gc = StorageGc(lock=self._lock, states=self._states, index=self._index, entry_log=self._entry_log,
                             journal=self._journal, checkpointer=self._checkpointer, refusal=self._refusal,
                             fail=self._fail_store)

    # --- writes -----------------------------------------------------------------------

    def add_entries(self, adds: Sequence[AddOp]) -> concurrent.futures.Future[list[int]]:
        """Store a batch of adds (``AddOp`` or plain 5-tuples); the future gives one status per add, in
        order, once the accepted ones are durable.

        The future is completed on the journal thread or on this one (see ``add_entries_then``): done-callbacks
        must be quick and must not block.
        """
        future = running_future()
        self.add_entries_then(adds, future.set_result)
        return future

    def add_entries_then(self, adds: Sequence[AddOp], on_done: Callable[[list[int]], None]) -> None:
        """``add_entries`` without a future: ``on_done(statuses)`` is called once, on the journal thread when
        the accepted adds are durable (or failed), or on this thread before the return: when none was submitted,
        or when this thread committed the group itself (a batch whose bodies all travel in the journal, given to
        an idle journal: ``Journal.lead``, docs/protocol.md B1).
        It must be quick, must not block and should not raise (the journal only logs what it raises). The add
        stream's way: a future per batch cost its completion chain a condition and four more calls."""
        statuses = [pb.BAD_REQUEST] * len(adds)
        valid = []  # (position, add, LAC, ADD record chunks or None)
        inline_max = self._inline_max
        for position, add in enumerate(adds):
            lac = checked_lac(add)
            if lac is not None:
                valid.append((position, add, lac,
                              encode_add(add[0], add[1], add[3]) if len(add[3]) <= inline_max else None))
        with self._lock:
            refusal = pb.IO_ERROR if self._refusal() is not None else pb.READ_ONLY if self._read_only_reason else None
            if self._index.failed and refusal is None:
                valid = refuse_failed_ledgers(valid, self._index.failed, statuses)
            batch = admit_batch(self._states, valid, statuses, refusal)
            submitted = bool(batch.entries) and self._store_and_submit(
                batch, completion(on_done, statuses, batch.accepted), statuses)
        if submitted is LEAD:  # the journal was idle: this thread writes and fsyncs the group itself
            self._journal.lead()
        elif not submitted:
            for position in batch.accepted:
                statuses[position] = pb.IO_ERROR
            on_done(statuses)

    def _store_and_submit(self, batch: AdmittedBatch, callback: Callable[[bool], None],
                          statuses: list[int]) -> bool | Lead:
        try:
            locations, failed = self._entries.store(batch.entries, referenced=bool(batch.unjournaled))
            last = locations[-1]
        except (OSError, StorageError) as exc:  # the entry log's tail is now in doubt
            self._fail_store(exc)
            return False
        if failed:  # their ledgers' index failed: they answer IO_ERROR, the rest goes on
            drop_unindexed(batch, failed, statuses)  # (new ledgers' key records are journaled all the same)
        referenced = batch.unjournaled
        if referenced:  # bodies only in the entry log: the journal fsyncs it before writing these references
            entries = batch.entries
            if len(referenced) < len(entries):
                entries, locations = [entries[i] for i in referenced], [locations[i] for i in referenced]
            batch.chunks.append(encode_add_refs(entries, locations))
            batch.records += len(referenced)
        return self._journal.submit(batch.chunks, sum(map(len, batch.chunks)), batch.records,
                                    self._durable_end.noting(callback, last), sync_first=bool(referenced),
                                    lead=not referenced)  # (the entry logs' fsync of references stays off it)

    def _index_full(self) -> None:
        if self._checkpointer is not None:  # (none yet during the journal's replay)
            self._checkpointer.request()

    def fence(self, ledger_id: int, master_key: bytes) -> concurrent.futures.Future[int]:
        """Durably fence the ledger (creating it fenced if unknown); resolves OK once fsync'd."""
        future = running_future()
        if not valid_ledger_id(ledger_id) or not valid_key(master_key):
            future.set_result(pb.BAD_REQUEST)
            return future
        with self._lock:
            status = self._fence_locked(ledger_id, master_key, future)
        if status is not None:
            future.set_result(status)
        return future

    def _fence_locked(self, ledger_id: int, master_key: bytes, future: concurrent.futures.Future) -> int | None:
        if self._refusal() is not None:
            return pb.IO_ERROR
        record = self._states.get(ledger_id)
        if record is None:
            record = self._states.create(ledger_id, master_key)  # docs/protocol.md F4: created fenced
        elif not hmac.compare_digest(record.master_key, bytes(master_key)):
            return pb.UNAUTHORIZED
        if record.fence_durable:  # already fenced on disk (F5): every fencing read of a recovery lands here
            return pb.OK
        self._states.fence(record)
        chunk = encode_fence(ledger_id, bytes(master_key))

        def done(durable: bool) -> None:
            if durable:
                record.fence_durable = True
            future.set_result(pb.OK if durable else pb.IO_ERROR)
        return None if self._journal.submit([chunk], len(chunk), 1, done) else pb.IO_ERROR

    # --- reads ------------------------------------------------------------------------

    def read_entry(self, ledger_id: int, entry_id: int, master_key: bytes | None = None) -> bytes:
        """The stored body; NoSuchLedger/NoSuchEntry only when truly absent, CorruptStorageError if damaged.

        With ``master_key`` it must match the ledger's (constant time, under the lock, so a ledger created
        between a caller's key check and its read is never served to the wrong key), else UnauthorizedError.
        """
        with self._lock:
            if self._closed:
                raise StorageError("bookie storage is closed")
            record = self._states.get(ledger_id) if valid_ledger_id(ledger_id) else None
            if record is None:
                raise NoSuchLedgerError(f"ledger {ledger_id} is not stored on this bookie")
            if master_key is not None and not hmac.compare_digest(record.master_key, bytes(master_key)):
                raise UnauthorizedError(f"master key does not match ledger {ledger_id}")
            try:
                location = self._index.get(ledger_id, entry_id) if 0 <= entry_id < 2**63 else None
            except CorruptStorageError as exc:
                log.error("read of ledger %d entry %d: %s", ledger_id, entry_id, exc)
                raise
        if location is None:
            raise NoSuchEntryError(f"ledger {ledger_id} has no entry {entry_id} on this bookie")
        return self._entry_log.read(location, ledger_id, entry_id)

    def damage_found(self) -> int:
        """How many damaged journal regions and entries the start skipped (``skip_journal_corruption``)."""
        return self._damage_at_start

    def ledger(self, ledger_id: int) -> LedgerView | None:
        with self._lock:
            return self._view(ledger_id)

    def _view(self, ledger_id: int) -> LedgerView | None:
        record = self._states.get(ledger_id)
        if record is None:
            return None
        return LedgerView(ledger_id, record.fenced, record.last_add_confirmed, record.last_entry_id)

    def has_ledger(self, ledger_id: int) -> bool:
        """Whether the bookie holds state for the ledger: a lock-free hint (one dict lookup) for the ledger guard;
        storage still decides under its lock."""
        return self._states.get(ledger_id) is not None

    def stored_key(self, ledger_id: int) -> bytes | None:
        """The master key this bookie keeps for the ledger, None if it has no state for it (for requests an
        administrator identity sends without the key: ``authorization``)."""
        with self._lock:
            record = self._states.get(ledger_id)
        return None if record is None else record.master_key

    def check_master_key(self, ledger_id: int, master_key: bytes) -> int:
        with self._lock:
            record = self._states.get(ledger_id)
        if record is None:
            return pb.NO_SUCH_LEDGER
        return pb.OK if hmac.compare_digest(record.master_key, bytes(master_key)) else pb.UNAUTHORIZED

    def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_s: float) -> LedgerView | None:
        """Return once the ledger's LAC > previous_lac, or at the timeout, with the current view."""
        with self._lock:
            self._lacs.wait(ledger_id, previous_lac, timeout_s, lambda: self._closed)
            return self._view(ledger_id)

    def write_lac(self, ledger_id: int, master_key: bytes,
                  last_add_confirmed: int) -> tuple[int, LedgerView | None]:
        """Explicit LAC: keep max(current, given) as the ledger's LAC, in memory, and wake its long polls.

        Returns a status (OK, NO_SUCH_LEDGER, UNAUTHORIZED, BAD_REQUEST) and the ledger's view after it.
        Not journaled (``storage_lac``); a fenced ledger accepts it."""
        if not valid_ledger_id(ledger_id) or not valid_key(master_key) or not -1 <= last_add_confirmed < 2**63:
            return pb.BAD_REQUEST, None
        with self._lock:
            if self._closed:
                raise StorageError("bookie storage is closed")
            status = self._lacs.write(ledger_id, master_key, last_add_confirmed)
            return status, None if status == pb.NO_SUCH_LEDGER else self._view(ledger_id)

    # --- garbage collection -----------------------------------------------------------

    def ledger_ids(self) -> set[int]:
        """Every ledger this bookie holds."""
        with self._lock:
            return self._states.ids()

    def delete_ledgers(self, ledger_ids: Sequence[int], written_before: float | None = None) -> list[int]:
        """Delete these ledgers here (their metadata is gone, or no longer names this bookie); returns those
        deleted. With ``written_before`` (a ``time.monotonic()`` value), a ledger this process stored an entry
        of at or after it is kept. Reads of deleted ledgers answer NO_SUCH_LEDGER at once; disk space comes
        back with ``reclaim_entry_logs``."""
        return self._gc.delete_ledgers(ledger_ids, written_before)  # a long poll ends at its next slice

    def reclaim_entry_logs(self) -> GcOutcome:
        """Make deletions durable (journal flush + checkpoint) and delete entry logs with no live ledger."""
        return self._gc.reclaim_entry_logs()

    def rotate_entry_log(self, threshold: float, min_bytes: int = ROTATE_MIN_BYTES) -> int | None:
        """Seal the current entry log early when, sealed, it would be deleted or compacted at once (no live ledger
        or a live share below ``threshold``, and at least ``min_bytes`` of entries); return its id, else None."""
        return self._gc.rotate_current_log(threshold, min_bytes)

    def compact_entry_logs(self, threshold: float) -> GcOutcome:
        """Copy the live entries out of sealed entry logs whose live share is below ``threshold``; delete them."""
        return self._gc.compact_entry_logs(threshold)

    # --- maintenance ------------------------------------------------------------------

    @property
    def failure(self) -> StorageError | None:
        """Why adds are refused (journal, entry log or checkpoint failure, or closed), else None."""
        with self._lock:
            return self._refusal()

    def index_failures(self) -> dict[str, int]:
        """Counts for the metrics: ledgers whose index failed (``ledgers_failed``; their adds answer IO_ERROR),
        reads that found index damage (``damaged_reads``), ledgers holding the journal mark back (``pinned``)."""
        with self._lock:
            return {"ledgers_failed": self._index.failures, "damaged_reads": self._index.damaged_reads,
                    "pinned": len(self._checkpointer.pinned) if self._checkpointer is not None else 0}

    def _fail_store(self, exc: Exception) -> None:
        self._store_failure = StorageError(f"storing entries failed ({exc}); the bookie takes no more adds "
                                           "until it is restarted (restart replays the journal)")
        self._store_failure.__cause__ = exc  # the errno tells a full disk from a failing one
        log.error("%s", self._store_failure)
        if self.on_failure is not None:
            self.on_failure()

    def _refusal(self) -> StorageError | None:
        if self._closed:
            return StorageError("bookie storage is closed")
        return self._store_failure or self._journal.failure or self._checkpointer.failure

    @property
    def read_only(self) -> str | None:
        """Why adds are refused READ_ONLY (e.g. the disk is nearly full), else None."""
        return self._read_only_reason

    def set_read_only(self, reason: str | None) -> None:
        """Refuse adds with READ_ONLY (``reason``) or, with None, take them again. Reads and fences go on."""
        with self._lock:
            self._read_only_reason = reason

    def checkpoint(self) -> None:
        if self._closed:
            raise StorageError("bookie storage is closed")
        self._checkpointer.checkpoint()

    def disk_usage(self) -> tuple[int, int]:
        usage = shutil.disk_usage(self._config.data_dir)
        return usage.free, usage.total

    def close(self) -> None:
        """Stop taking requests, drain the journal, checkpoint, stop threads, close files. Idempotent.

        Call it once the servicer stopped: a read racing with close may fail with StorageError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lacs.wake_all()
        self._checkpointer.stop()
        self._journal.close()
        if self._store_failure is None and self._journal.failure is None and self._checkpointer.failure is None:
            try:
                self._checkpointer.checkpoint()
            except StorageError:
                log.exception("final checkpoint failed; the journal will be replayed at the next start")
        self._release()

    def _release(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        if self._journal is not None:
            self._journal.close()
        if self._entry_log is not None:
            self._entry_log.close()
        if self._lock_fd is not None:
            unlock_directory(self._lock_fd)
            self._lock_fd = None
