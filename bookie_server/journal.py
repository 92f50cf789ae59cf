"""The journal writer: one thread that group-commits queued records to append-only files.

Callers ``submit`` already-encoded records with a completion callback. The
journal thread takes every pending submission (up to the batch limits, waiting
at most ``journal_max_wait_ms`` after the first was queued), writes them with
one ``writev`` that ends with a COMMIT record (the group's record count and
length; see ``journal_format``), fsyncs once, then calls each callback with
``True``. Each file starts with a FILE_HEADER record (format version 2),
fsync'd at creation, and runs ahead of its records with zeros that a thread
of their own writes and fsyncs (``journal_space``, docs/protocol.md B7).

Leading (docs/protocol.md B1): a caller may ask to commit its own submission
(``submit(..., lead=True)``). When no group commit is running or being formed
and no group wait is configured, ``submit`` returns ``LEAD`` and the caller
must then call ``lead()`` (after releasing its own locks): it commits what is
queued at that moment on its own thread, as the journal thread would have, and
the journal thread is not woken. A paced add then reaches its fsync with no
thread hand-off. Whoever commits -- the journal thread or a leader -- holds the
journal's ``_busy`` flag, so one group is written at a time, in queue order;
submissions made meanwhile wait for the journal thread, which takes them once
the flag is free.

Failure policy: if a write or fsync fails, every submission of that batch and
every queued one completes with ``False``, the journal stops for good
(``failure`` is set, later ``submit`` calls return ``False``) and the bytes
already in the file stay as they are: a torn last batch (no COMMIT record
after its damage) is truncated away by replay at the next start. An fsync is never retried, since after a failed
fsync the kernel may have dropped the dirty pages; a failed fsync of the zeros ahead fails the next group commit.
"""
from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from bookie_server.files import Buffer, fsync_dir, numbered_files, numbered_name, write_all
from bookie_server.journal_format import encode_commit, encode_file_header
from bookie_server.journal_space import JournalSpace
from bookie_server.storage_config import StorageConfig
from pyspark_ledger.errors import StorageError

log = logging.getLogger(__name__)

JOURNAL_SUFFIX = ".txn"
_DROP_STEP = 1024 * 1024
_PAGE = 4096
# Test hook: with this set to N, the fsync of the (N+1)-th group commit of the process fails with EIO, as a
# failing disk's would (there is no failing block device to test with; see tests/bookie/test_storage_failure.py).
FAULT_FSYNC_ENV = "BOOKIE_FAULT_JOURNAL_FSYNC_AFTER"
_FAULT_FSYNC_AFTER = int(os.environ[FAULT_FSYNC_ENV]) if os.environ.get(FAULT_FSYNC_ENV) else None
SyncListener = Callable[[int, int, float], None]


class Lead:
    """``submit``'s answer when the caller is to commit its submission itself (``Journal.lead``)."""

    def __bool__(self) -> bool:  # accepted, like True
        return True

    def __repr__(self) -> str:
        return "LEAD"


LEAD = Lead()


class JournalMark(NamedTuple):
    """A position in the journal: everything before it is durable in the journal."""

    file_id: int
    offset: int


class _Submission(NamedTuple):
    chunks: Sequence[Buffer]
    nbytes: int
    nrecords: int
    queued_at: float
    callback: Callable[[bool], None]
    sync_first: bool  # run ``before_write`` (fsync the entry logs) before writing this submission
    new_file_at: int = 0  # > 0: the group starts a new file first if the current one holds this many bytes


def journal_files(directory: Path) -> list[tuple[int, Path]]:
    return numbered_files(directory, JOURNAL_SUFFIX)


def journal_path(directory: Path, file_id: int) -> Path:
    return directory / numbered_name(file_id, JOURNAL_SUFFIX)


class Journal:
    """Appends records to ``<dir>/<id>.txn`` files, starting a new file at ``first_file_id``."""

    def __init__(self, config: StorageConfig, first_file_id: int,
                 on_sync: SyncListener | None = None, before_write: Callable[[], None] | None = None) -> None:
        """``before_write`` runs on the journal thread before each batch is written (e.g. fsync the entry
        logs its records point to); if it raises, the batch fails like a failed write."""
        self._dir: Path = config.journal_dir
        self._max_wait_s = config.journal_max_wait_ms / 1000.0
        self._max_records = config.journal_max_batch_records
        self._max_bytes = config.journal_max_batch_bytes
        self._file_size = config.journal_file_size
        self._prealloc = config.journal_preallocate_bytes
        self._on_sync = on_sync
        self._before_write = before_write
        self._lock = threading.Lock()  # taken alone where nobody waits or is woken (a C-level ``with``)
        self._cond = threading.Condition(self._lock)
        self._queue: deque[_Submission] = deque()
        self._busy = False  # a group commit is being formed or written (by the journal thread or a leader)
        self._closing = False
        self._failure: StorageError | None = None
        self._file_id = first_file_id
        self._fd, self._offset = self._create_file(first_file_id)
        self._space = self._new_space(first_file_id, self._offset)  # the zeros ahead of the records
        self._dropped = 0  # page cache of the current file dropped below this offset
        self._synced = JournalMark(first_file_id, self._offset)
        self._submitted = 0  # submissions accepted so far; they are written in this order
        self._durable = 0  # of those, how many are fsync'd (all before ``_synced``)
        self._thread = threading.Thread(target=self._run, name="bookie-journal", daemon=True)
        self._thread.start()

    @property
    def failure(self) -> StorageError | None:
        return self._failure

    def submit(self, chunks: Sequence[Buffer], nbytes: int, nrecords: int,
               callback: Callable[[bool], None], sync_first: bool = True, new_file_at: int = 0,
               lead: bool = False) -> bool | Lead:
        """Queue records; ``callback(durable)`` runs on the committing thread once they are fsync'd
        (True) or failed (False). Returns False, without queueing, if the journal is stopped.
        ``sync_first=False``: the records need no ``before_write`` (a group commit made only of such
        submissions skips it). ``new_file_at``: see ``flush``. ``lead``: commit on this thread if the journal
        is idle; then ``LEAD`` is returned, and the caller must call ``lead()`` (see the module docstring)."""
        with self._cond:
            if self._closing or self._failure is not None:
                return False
            self._queue.append(_Submission(chunks, nbytes, nrecords, time.monotonic(), callback, sync_first,
                                           new_file_at))
            self._submitted += 1
            if lead and not self._busy and not self._max_wait_s:
                self._busy = True
                return LEAD
            self._cond.notify()
        return True

    def lead(self) -> None:
        """Commit what is queued now on this thread (only after ``submit`` returned ``LEAD``), then let the
        journal thread take whatever was queued meanwhile."""
        try:
            with self._cond:
                batch = self._take_queued()
            if batch:
                self._commit(batch)
        finally:
            with self._cond:
                self._busy = False
                if self._queue or self._closing:
                    self._cond.notify()

    @property
    def submitted(self) -> int:
        """How many submissions were accepted so far (a sequence number for ``durable_position``)."""
        with self._cond:
            return self._submitted

    def durable_position(self) -> tuple[JournalMark, int]:
        """The mark and how many submissions are fsync'd: every submission numbered up to that count is
        before the mark (submissions are written in the order they were accepted)."""
        with self._cond:
            return self._synced, self._durable

    def flush(self, timeout_s: float, new_file_at: int = 0) -> bool:
        """Wait until everything submitted before this call is fsync'd; False if the journal failed,
        is closed or did not get there within ``timeout_s``. With ``new_file_at`` > 0, a current file of at
        least that many bytes is closed first and the mark moves to a new one, so that the next checkpoint
        deletes it (the garbage collector's way to give back the journal's copies of deleted ledgers without
        waiting for ``journal_file_size``)."""
        done = threading.Event()
        outcome: list[bool] = []

        def record(durable: bool) -> None:
            outcome.append(durable)
            done.set()
        if not self.submit([], 0, 0, record, new_file_at=new_file_at):
            return False
        return done.wait(timeout_s) and outcome == [True]

    def mark(self) -> JournalMark:
        """The position just after the last fsync'd batch."""
        with self._cond:
            return self._synced

    def remove_files_before(self, file_id: int) -> int:
        """Delete journal files wholly before ``file_id`` (never the current one); return how many."""
        removed = 0
        for found_id, path in journal_files(self._dir):
            if found_id < min(file_id, self._file_id):
                path.unlink(missing_ok=True)
                removed += 1
        if removed:
            fsync_dir(self._dir)
        return removed

    def close(self) -> None:
        """Write out everything queued, stop the thread and close the file. Idempotent."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
        if self._fd >= 0:
            try:
                self._cut_preallocation()
            except OSError as exc:  # the zeros stay: the next start's replay truncates them
                log.warning("journal file %d: cannot cut its preallocated tail: %s", self._file_id, exc)
            os.close(self._fd)
            self._fd = -1

    # --- journal thread -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if not batch:
                return
            try:
                self._commit(batch)
            finally:
                with self._cond:
                    self._busy = False

    def _take_queued(self) -> list[_Submission]:
        """A leader's group (journal lock held): what is queued, up to the batch limits, with no wait."""
        batch: list[_Submission] = []
        self._take_fitting(batch, 0, 0)
        return batch

    def _take_batch(self) -> list[_Submission]:
        """The journal thread's next group: the oldest submission, then what arrives within its group wait
        (``journal_max_wait_ms``) while the group is under its limits; [] once closing with nothing queued."""
        with self._cond:
            while self._busy or (not self._queue and not self._closing):  # (a leader's commit first)
                self._cond.wait()
            if not self._queue:
                return []
            self._busy = True
            batch: list[_Submission] = []
            deadline = self._queue[0].queued_at + self._max_wait_s
            records, nbytes = self._take_fitting(batch, 0, 0)
            while not self._queue and records < self._max_records and nbytes < self._max_bytes:
                remaining = deadline - time.monotonic()
                if self._closing or remaining <= 0 or not self._cond.wait(remaining):
                    break
                records, nbytes = self._take_fitting(batch, records, nbytes)
            return batch

    def _take_fitting(self, batch: list[_Submission], records: int, nbytes: int) -> tuple[int, int]:
        """Move queued submissions into ``batch`` (journal lock held) while they fit its limits of records and
        bytes (the first of an empty batch always: one submission is never split); the batch's records and bytes
        after. Stops at the first that does not fit, so submissions stay in their order."""
        queue = self._queue
        while queue:
            nxt = queue[0]
            if batch and (records + nxt.nrecords > self._max_records or nbytes + nxt.nbytes > self._max_bytes):
                break
            batch.append(queue.popleft())
            records += nxt.nrecords
            nbytes += nxt.nbytes
        return records, nbytes

    def _commit(self, batch: list[_Submission]) -> None:
        nbytes = records = 0
        sync_first = new_file = False
        chunks: list[Buffer] = []
        offset = self._offset
        for item in batch:  # one pass (this runs per group commit, often of one submission)
            nbytes += item.nbytes
            records += item.nrecords
            sync_first = sync_first or item.sync_first
            new_file = new_file or 0 < item.new_file_at <= offset
            chunks.extend(item.chunks)
        try:
            if offset >= self._file_size or new_file:
                self._rotate()
            if sync_first and self._before_write is not None:
                self._before_write()
            if nbytes:  # an empty group (flushes only) writes nothing
                chunks.append(encode_commit(records, nbytes))
                self._space.claim(self._offset, self._offset + nbytes + len(chunks[-1]), self._fd)  # records, COMMIT
            written = write_all(self._fd, chunks)
            started = time.monotonic()
            if _FAULT_FSYNC_AFTER is not None and self._commits_before_fault() <= 0:
                raise OSError(errno.EIO, f"fdatasync failed (fault injected by {FAULT_FSYNC_ENV})")
            os.fdatasync(self._fd)
            fsync_seconds = time.monotonic() - started
        except Exception as exc:  # OSError, or a bug: either way nothing in the batch is known durable
            self._fail(batch, exc)
            return
        self._offset += written
        self._drop_cached()
        with self._lock:
            self._synced = JournalMark(self._file_id, self._offset)
            self._durable += len(batch)
        for item in batch:
            try:
                item.callback(True)
            except Exception:  # a listener's bug must not stop the journal (as in _call)
                log.exception("journal callback %r failed", item.callback)
        if self._on_sync is not None:
            _call(self._on_sync, records, nbytes, fsync_seconds)

    def _drop_cached(self) -> None:
        """Drop the page cache of fsync'd journal bytes (read only by replay), a megabyte at least at a time,
        so that the next writes reuse pages instead of touching fresh memory (costly in a VM)."""
        upto = self._offset & ~(_PAGE - 1)
        if upto - self._dropped < _DROP_STEP:
            return
        try:
            os.posix_fadvise(self._fd, self._dropped, upto - self._dropped, os.POSIX_FADV_DONTNEED)
        except OSError as exc:
            log.debug("cannot drop cached pages of journal file %d: %s", self._file_id, exc)
        self._dropped = upto

    def _new_space(self, file_id: int, size: int) -> JournalSpace:
        return JournalSpace(journal_path(self._dir, file_id), size, self._prealloc)

    def _cut_preallocation(self) -> None:
        """Stop the zeros of the current file and cut it to its records (a closed file ends with its last group
        commit), synced."""
        if self._space.stop() > self._offset:
            os.ftruncate(self._fd, self._offset)
            os.fdatasync(self._fd)

    def _rotate(self) -> None:
        self._cut_preallocation()
        fd, offset = self._create_file(self._file_id + 1)
        os.close(self._fd)
        self._fd, self._file_id, self._offset, self._dropped = fd, self._file_id + 1, offset, 0
        self._space = self._new_space(self._file_id, offset)

    def _create_file(self, file_id: int) -> tuple[int, int]:
        """A new file holding its FILE_HEADER record, durable with its directory entry: (fd, its size). Records are
        written at the file's offset (``write_all`` from the position ``lseek`` left), not appended: the file may
        hold preallocated zeros past them."""
        fd = os.open(journal_path(self._dir, file_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            header = encode_file_header()
            write_all(fd, [header])
            os.fdatasync(fd)
            fsync_dir(self._dir)
        except BaseException:
            os.close(fd)
            raise
        return fd, len(header)

    def _commits_before_fault(self) -> int:
        """How many more group commits may succeed before the injected fsync fault (test hook only)."""
        global _FAULT_FSYNC_AFTER
        left, _FAULT_FSYNC_AFTER = _FAULT_FSYNC_AFTER, max(0, _FAULT_FSYNC_AFTER - 1)
        return left

    def _fail(self, batch: list[_Submission], exc: Exception) -> None:
        path = journal_path(self._dir, self._file_id)
        failure = StorageError(f"journal write/fsync to {path} failed ({exc}); the bookie takes no more "
                               "adds until it is restarted (restart replays the journal)")
        failure.__cause__ = exc
        log.error("%s", failure)
        with self._cond:
            self._failure = failure
            batch = batch + list(self._queue)
            self._queue.clear()
        for item in batch:
            _call(item.callback, False)


def _call(function: Callable[..., None], *args: object) -> None:
    try:
        function(*args)
    except Exception:  # a listener's bug must not stop the journal
        log.exception("journal callback %r failed", function)
