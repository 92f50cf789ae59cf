"""Checkpoints: make entry logs, index and ledger state durable, then move the journal mark.

A checkpoint
  1. takes the journal mark (end of the last fsync'd journal batch): every
     record before it has already been applied to the entry logs, index and
     ledger state in memory;
  2. under the storage lock, lists the dirty index pages (``dirty_keys``);
  3. fsyncs the entry logs, then writes the pages a chunk of ``CHUNK_BYTES``
     at a time: copies the chunk's pages under the lock, fsyncs the entry
     logs again (covering every entry those copies point to, also those
     added since the checkpoint began), writes and fsyncs the pages without
     the lock, marks them clean under it (they are evictable from then on).
     A ledger's pages go in record order, so a ledger split over chunks
     extends its file from the front; a ledger that fails in one chunk is
     left out of the later ones. So a checkpoint holds one chunk's copies
     whatever the number of dirty pages. Then, once every chunk is durable,
     under the lock, it encodes the ledger state with each index file's
     count of durable page records, and atomically replaces the state
     snapshot (the counts are persisted only with every chunk durable). The
     first checkpoint of a directory without a snapshot writes one even when
     no ledger changed (docs/protocol.md B6: no mark without a snapshot);
  4. atomically replaces the mark file (temp, fsync, rename, fsync dir) with
     the mark, or with an older one if a ledger's index is pinning it;
  5. unlinks the index files of ledgers garbage collected before step 1
     (deleted at a journal sequence the mark covers: see ``storage_gc``);
  6. deletes journal files wholly before the mark.
With the mark persisted, it writes the replay hint (``replay_hint``): the end
of the entry-log bodies of the last add group known durable before the mark
was taken, where replay starts looking for bodies already in the entry logs.
Adds keep running meanwhile: whatever they change after step 1 is replayed
from the journal after a crash, and replay is idempotent.

A failed checkpoint is sticky (``failure``): after a failed fsync the kernel
may have dropped dirty pages, so no later checkpoint may move the mark past
them. The owner then stops taking adds; a restart replays the journal.

Except one ledger's index pages: if they cannot be written, that ledger
fails alone (``LedgerIndex.fail``: its adds are refused) and is pinned
(``pin``): the mark persisted from then on is at most the last mark
persisted before its failure, so the journal keeps every record whose index
slot is not durable, and a restart replays them (the journal is kept, and
grows, until the ledger's pages are written: each checkpoint tries again,
and a success unpins it). The owner also pins a ledger whose index failed
while the journal was replayed at start (its replayed entries may have been
acknowledged). Other ledgers' checkpoints go on.
"""
from __future__ import annotations

import logging
import os
import struct
import threading
from pathlib import Path
from typing import Callable, Iterator

import crc32c

from bookie_server.entry_log import EntryLogger
from bookie_server.files import atomic_write
from bookie_server.index import PAGE_BYTES, LedgerIndex, PageKey
from bookie_server.journal import Journal, JournalMark
from bookie_server.journal_replay import NO_MARK
from bookie_server.ledger_state import LedgerStates
from bookie_server.replay_hint import write_hint
from pyspark_ledger.errors import CorruptStorageError, StorageError

log = logging.getLogger(__name__)

_MARK = struct.Struct(">4sQQ")
_MARK_MAGIC = b"PLMK"
CRASH_POINT_ENV = "BOOKIE_CRASH_POINT"
#: index page bytes a checkpoint copies (and writes, fsyncs, marks clean) at a time
CHUNK_BYTES = 4 * 1024 * 1024


def crash_point(name: str) -> None:
    """Test hook: exit at once, like kill -9, when env BOOKIE_CRASH_POINT names this point."""
    if os.environ.get(CRASH_POINT_ENV) == name:
        os._exit(137)


def read_mark(path: Path) -> JournalMark:
    """The last persisted mark, or the start of the journal if none was ever persisted."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return NO_MARK
    except OSError as exc:
        raise StorageError(f"cannot read the checkpoint mark {path}: {exc}") from exc
    if len(data) != _MARK.size + 4 or int.from_bytes(data[-4:], "big") != crc32c.crc32c(data[:-4]):
        raise CorruptStorageError(f"checkpoint mark {path} is damaged; restore the data directory from a replica")
    magic, file_id, offset = _MARK.unpack_from(data)
    if magic != _MARK_MAGIC:
        raise CorruptStorageError(f"checkpoint mark {path} has a wrong magic {magic!r}")
    return JournalMark(file_id, offset)


def chunks(keys: list[PageKey], size: int) -> Iterator[list[PageKey]]:
    """``keys`` in consecutive runs of at most ``size`` (at least one)."""
    size = max(1, size)
    for start in range(0, len(keys), size):
        yield keys[start:start + size]


def write_mark(path: Path, mark: JournalMark) -> None:
    data = _MARK.pack(_MARK_MAGIC, mark.file_id, mark.offset)
    atomic_write(path, data + crc32c.crc32c(data).to_bytes(4, "big"))


class Checkpointer:
    """Runs checkpoints one at a time: on demand, on ``request()``, and every ``interval_s`` (0 = never)."""

    def __init__(self, *, mark_path: Path, snapshot_path: Path, journal: Journal, entry_logger: EntryLogger,
                 index: LedgerIndex, states: LedgerStates, lock: threading.Lock, interval_s: float,
                 initial_mark: JournalMark | None = None, chunk_bytes: int | None = None,
                 hint_position: Callable[[], tuple[int, int] | None] | None = None,
                 snapshot_exists: bool = True) -> None:
        """``hint_position()``: the entry-log position for the replay hint, read before each mark is taken;
        ``snapshot_exists``: the state snapshot file is there (else the first checkpoint writes one)."""
        self._mark_path = mark_path
        self._snapshot_exists = snapshot_exists
        self._hint_position = hint_position
        self._snapshot_path = snapshot_path
        self._journal = journal
        self._entry_logger = entry_logger
        self._index = index
        self._states = states
        self._lock = lock
        self._interval_s = interval_s or None
        self._chunk_pages = max(1, (chunk_bytes or CHUNK_BYTES) // PAGE_BYTES)
        self._run_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._failure: StorageError | None = None
        self._last_mark: JournalMark | None = None  # the mark of the last checkpoint (persisted or pinned)
        self._persisted: JournalMark = initial_mark if initial_mark is not None else NO_MARK
        self._pins: dict[int, JournalMark] = {}  # ledger -> the mark it holds back
        self._thread = threading.Thread(target=self._run, name="bookie-checkpoint", daemon=True)

    @property
    def failure(self) -> StorageError | None:
        return self._failure

    @property
    def pinned(self) -> dict[int, JournalMark]:
        """Ledgers holding the journal mark back (ledger -> mark), because their index pages are not durable."""
        return dict(self._pins)

    @property
    def mark_held_back(self) -> bool:
        """True while a ledger is pinned: the persisted mark may be older than the last one taken."""
        return bool(self._pins)

    def pin(self, ledger_id: int) -> None:
        """Keep the persisted mark at or before where it is now until the ledger's index pages are written."""
        self._pins.setdefault(ledger_id, self._persisted)

    def start(self) -> None:
        self._thread.start()

    def request(self) -> None:
        """Ask the background thread for a checkpoint soon (e.g. the index cache is full)."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def checkpoint(self) -> None:
        """Run one checkpoint now; raise StorageError if it (or an earlier one) failed."""
        with self._run_lock:
            if self._failure is not None:
                raise StorageError(f"no checkpoint after a failed one ({self._failure}); restart the bookie")
            try:
                self._checkpoint()
            except Exception as exc:  # OSError, StorageError, or a bug: the mark must not move any more
                self._failure = StorageError(f"checkpoint failed: {exc}; the bookie takes no more adds until "
                                             "it is restarted (restart replays the journal)")
                raise self._failure from exc

    def _checkpoint(self) -> None:
        hint = self._hint_position() if self._hint_position is not None else None  # before the mark: at or before it
        mark, durable = self._journal.durable_position()
        crash_point("checkpoint_after_mark_taken")
        with self._lock:
            keys = self._index.dirty_keys()
            changed = self._states.dirty
            removed = self._index.ready_discards(durable, lambda ledger_id: self._states.get(ledger_id) is not None)
        if mark == self._last_mark and not keys and not changed and not removed and self._snapshot_exists:
            return  # nothing happened since the last checkpoint
        failed: dict[int, Exception] = {}
        try:
            self._entry_logger.sync(paced=True)  # (written out a step at a time: the journals share the disk)
            written = self._write_chunks(keys, failed)
            with self._lock:
                snapshot = self._states.snapshot(self._index.durable_pages, force=not self._snapshot_exists)
            crash_point("checkpoint_before_snapshot")
            if snapshot is not None:
                LedgerStates.persist(self._snapshot_path, snapshot)
                self._snapshot_exists = True
        except BaseException:
            with self._lock:
                self._states.mark_dirty()
            raise
        for ledger_id in failed:
            self.pin(ledger_id)
        for ledger_id in written.difference(failed).intersection(self._pins):
            del self._pins[ledger_id]  # its pages are durable now
            log.warning("index pages of ledger %d were written at last; it no longer holds the journal back",
                        ledger_id)
        persisted = min([mark, *self._pins.values()])
        crash_point("checkpoint_before_mark_persist")
        write_mark(self._mark_path, persisted)
        if persisted == mark:
            write_hint(self._mark_path.parent, mark, hint)
        self._last_mark, self._persisted = mark, persisted
        if removed and persisted == mark:  # (held back, replay could still need the ledger's file)
            crash_point("checkpoint_before_index_unlink")
            self._index.remove_files(removed)
            with self._lock:
                self._index.forget_discards(removed)
        self._journal.remove_files_before(persisted.file_id)

    def _write_chunks(self, keys: list[PageKey], failed: dict[int, Exception]) -> set[int]:
        """Copy, write, fsync and mark clean the pages of ``keys`` a chunk at a time (``chunk_pages``), so a
        checkpoint holds at most a chunk's copies (and encoded records) whatever the number of dirty pages,
        and the pages cleaned by a chunk are evictable during the next. A ledger that fails in a chunk is left
        out of the later ones (its pages stay dirty); ``failed`` collects them (ledger -> error). Returns the
        ledgers some of whose pages were written."""
        written: set[int] = set()
        for chunk in chunks(keys, self._chunk_pages):
            with self._lock:
                copies = self._index.copy_pages(key for key in chunk if key.ledger_id not in failed)
            if not copies:
                continue
            self._entry_logger.sync()  # the entries the copies point to, added since the last sync too
            errors = self._index.write_pages(copies)
            with self._lock:
                if self._index.mark_clean(copies, errors):
                    self._states.mark_dirty()  # new page counts
            failed.update(errors)
            written.update(copy.ledger_id for copy in copies)
            del copies
        return written

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stopping:
                return
            try:
                self.checkpoint()
            except StorageError:
                log.exception("background checkpoint failed; stopping background checkpoints")
                return
