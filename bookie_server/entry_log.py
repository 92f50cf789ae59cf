"""Entry logs: the entries of all ledgers, interleaved in large append-only files.

Each record is::

    0  magic  b"PLEL"
    4  crc32c u32 big-endian over bytes 8 .. end of record
    8  ledger id u64, 16 entry id i64, 24 body length u32
    28 body

With ``direct_io`` on a file system that does direct I/O, a batch of records is
copied into the aligned buffers of an ``entry_log_direct.DirectWriter``, which writes whole blocks
around the page cache each block once, and the zeros after a sync's end are padding that every
reader steps over (docs/protocol.md B9); records not yet written are read from that buffer.
Otherwise a batch goes to the kernel with one ``writev`` (page cache only), and for bodies that the journal
only references, every ``WRITEBACK_STEP`` bytes the writeback of the pages written since is started, not waited
for.
``sync`` writes what is staged, then fsyncs every log written since the previous sync: at checkpoint time
(``paced``: first written out a ``WRITE_OUT_STEP`` at a time, each step waited
for, so that the disk the journal's group commits share is never flooded),
and before each journal group commit when the journal holds references
instead of entry bodies (``StorageConfig.journal_write_data`` off). Once
durable, all but the newest ``cache_window`` bytes leave the page cache, so
that appends reuse pages instead of touching fresh memory (see ``_drop_cached``).
A new log is started by the first append after open, when the current one reaches
``entry_log_size``, and when the garbage collector seals it early (``rotate``).
The current log's blocks are allocated ``preallocate_bytes`` ahead of its records and
given back when it is sealed or closed, or at the next open after a crash
(``entry_log_ahead``, docs/protocol.md B8).
Reads check the record's ids and checksum and raise ``CorruptStorageError``
when they do not match.

For garbage collection the logger keeps each log's ``LogUsage`` (which
ledgers, how many bytes; see ``entry_log_usage``), persists it when a log is
sealed, rebuilds it at open, and deletes whole logs (``remove_log``) once
the collector has made sure nothing can need them any more. The newest log
on disk is never removed, so a log id is never used twice.
"""
from __future__ import annotations

import logging
import os
import struct
import threading
from functools import partial
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

import crc32c

from bookie_server.entry_log_usage import USAGE_SUFFIX, LogUsage, load_usage, usage_path, write_usage
from bookie_server.entry_log_ahead import PREALLOCATE_BYTES, BlocksAhead, give_back_left
from bookie_server.entry_log_direct import BLOCK, DirectWriter, open_direct
from bookie_server.files import Buffer, fsync_dir, numbered_files, numbered_name, start_writeback, write_all, write_out
from pyspark_ledger.errors import CorruptStorageError, StorageError

log = logging.getLogger(__name__)

MAGIC = b"PLEL"
LOG_SUFFIX = ".log"
HEADER_SIZE = 28
_CRC = struct.Struct(">I")
_HEAD = struct.Struct(">4sI")  # magic, crc32c
_FIXED = struct.Struct(">QqI")
_SMALL_READ = 64 * 1024  # below this, header and body are read with one pread
CACHE_WINDOW = 64 * 1024 * 1024  # durable bytes of the newest logs left in the page cache (tailing reads)
_DROP_STEP = 1024 * 1024
_PAGE = 4096
# A checkpoint writes a log's unsynced bytes out this many at a time, each step waited for, before its fsync: the
# disk's queue never holds more than a step of them, so the journals' group commits are not stuck behind all the
# entries since the last checkpoint at once.
WRITE_OUT_STEP = 1024 * 1024
# Bytes of bodies a sync will soon wait for (``append_batch``'s ``writeback``) between two writeback starts; measured
# in docs/measurements.md:
# "Entry-log writeback started as appends go, and a direct sync that does not hold up the adds".
WRITEBACK_STEP = 1024 * 1024


class EntryLocation(NamedTuple):
    log_id: int
    offset: int  # of the record header
    length: int  # of the body


class EntryLogger:
    """Appends entries to ``<dir>/<id>.log`` files and reads them back by location.

    ``append_batch``, ``remove_log`` and the usage accessors must be called by one thread at a time
    (the storage lock); ``read`` and ``sync`` may run concurrently with them.
    """

    def __init__(self, directory: Path, max_log_size: int, cache_window: int = CACHE_WINDOW,
                 preallocate_bytes: int = PREALLOCATE_BYTES, direct_io: bool = False) -> None:
        self._dir = directory
        self._direct: DirectWriter | None = DirectWriter() if direct_io else None
        self._max_size = max_log_size
        self._cache_window = cache_window
        self._ahead = BlocksAhead(preallocate_bytes, max_log_size)
        self._lock = threading.Lock()
        self._writeback_from = 0  # the current log's bytes below this were handed to writeback (page cache only)
        self._fds: dict[int, int] = {}
        self._unsynced: set[int] = set()
        self._written: dict[int, int] = {}  # log id -> end of its last append
        self._dropped: dict[int, int] = {}  # log id -> offset below which its page cache was dropped
        self._synced_end: dict[int, int] = {}  # log id -> its end at its last sync
        self._dir_dirty = False
        self._closed = False
        self._readers: dict[int, int] = {}  # log id -> reads in progress (a removed log's fd waits for them)
        self._retired: dict[int, int] = {}  # log id -> fd of a removed log still being read
        existing = numbered_files(directory, LOG_SUFFIX)
        for _, path in existing:
            give_back_left(path)
        self._log_id = (existing[-1][0] if existing else 0) + 1  # created at the first append
        self._offset = 0
        self._started = False
        self._usage = {log_id: _load_usage(path) for log_id, path in existing}
        _remove_orphan_usage_files(directory, set(self._usage))

    def path(self, log_id: int) -> Path:
        return self._dir / numbered_name(log_id, LOG_SUFFIX)

    @property
    def direct_io(self) -> bool:
        """True while the current log is written around the page cache (B9)."""
        return self._direct is not None

    def append_batch(self, entries: Iterable[tuple[int, int, Buffer]], writeback: bool = False) -> list[EntryLocation]:
        """Append (ledger id, entry id, body) records in one write; return their locations
        (plain ``(log id, offset, length)`` tuples, the fields of ``EntryLocation``). ``writeback``: a sync will
        soon wait for them (bodies the journal only references), so through the page cache the writeback of the
        whole pages written since the last start is started once ``WRITEBACK_STEP`` bytes gathered.

        Raises OSError; after a failure the log's tail is undefined, so the
        caller must stop appending (the storage becomes read-only).
        """
        if not self._started or self._offset >= self._max_size:
            if self._started:
                self._seal(self._log_id)
            self._start_log(self._log_id + 1 if self._started else self._log_id)
        log_id = self._log_id
        direct = self._direct
        # where the records go: the log's end, or for direct writes the next block after padding (B9)
        offset = self._offset if direct is None else direct.end
        chunks: list[Buffer] = []
        locations = []
        ledger_bytes: dict[int, int] = {}
        pack_fixed, pack_head, crc, append_chunk = _FIXED.pack, _HEAD.pack, crc32c.crc32c, chunks.append
        for ledger_id, entry_id, body in entries:
            length = len(body)
            ledger_bytes[ledger_id] = ledger_bytes.get(ledger_id, 0) + length
            fixed = pack_fixed(ledger_id, entry_id, length)
            append_chunk(pack_head(MAGIC, crc(body, crc(fixed))) + fixed)
            append_chunk(body)
            locations.append((log_id, offset, length))
            offset += HEADER_SIZE + length
        usage = self._usage[log_id]
        for ledger_id, nbytes in ledger_bytes.items():
            usage.add(ledger_id, nbytes)
        ahead = self._ahead
        if offset + BLOCK > ahead.end and ahead.step:
            ahead.reserve(log_id, self._fds[log_id], self.path(log_id), offset + BLOCK)
        if direct is None:
            write_all(self._fds[log_id], chunks)
            if writeback and offset - self._writeback_from >= WRITEBACK_STEP:
                upto = offset & ~(_PAGE - 1)
                start_writeback(self._fds[log_id], self._writeback_from, upto)
                self._writeback_from = upto
        else:
            nbytes = offset - locations[0][1] if locations else 0
            start = direct.append(chunks, nbytes)
            if locations and start != locations[0][1]:  # a sync padded the log meanwhile: the records moved
                shift = start - locations[0][1]
                locations = [(log, at + shift, length) for log, at, length in locations]
                offset += shift
        self._offset = offset
        with self._lock:  # only after the write: a sync that cleared the set before it must not cover it
            self._unsynced.add(log_id)
            self._written[log_id] = offset
        return locations

    def read(self, location: EntryLocation, ledger_id: int, entry_id: int) -> bytes:
        """The body stored at ``location``; CorruptStorageError if it is not that entry, intact."""
        log_id, offset, length = location
        what = f"ledger {ledger_id} entry {entry_id} in entry log {self.path(log_id)} at offset {offset}"
        try:
            fd = self._read_fd(log_id)
        except FileNotFoundError as exc:
            raise CorruptStorageError(f"{what}: the entry log file is missing") from exc
        except OSError as exc:
            raise StorageError(f"reading {what} failed: {exc}") from exc
        try:
            direct = self._direct
            if direct is None or offset + HEADER_SIZE + length <= direct.written:  # all in the file
                header, body = _read_record(partial(os.pread, fd), offset, length, ledger_id, entry_id, what)
            else:  # perhaps not all written yet: the rest is in the direct writer's buffer
                header, body = _read_record(partial(direct.read, fd, log_id), offset, length, ledger_id, entry_id,
                                            what)
        except OSError as exc:
            raise StorageError(f"reading {what} failed: {exc}") from exc
        finally:
            self._release_fd(log_id)
        _check_record(header, body, ledger_id, entry_id, length, what)
        return body

    # --- garbage collection (storage lock held) ----------------------------------------

    @property
    def current_log_id(self) -> int | None:
        """The log being appended to, None before the first append after open."""
        return self._log_id if self._started else None

    def usage(self) -> dict[int, LogUsage]:
        """Every log's usage map by log id (the logger's own objects: read them under the storage lock)."""
        return self._usage

    def rotate(self) -> int | None:
        """Seal the current log ahead of its size and start the next one now (its file created at once, so the
        sealed log is no longer the newest on disk); return the sealed log's id, None if no log has entries
        yet. Raises OSError (the new file could not be created: the old one stays current)."""
        if not self._started or self._offset == 0:
            return None
        sealed = self._log_id
        self._start_log(sealed + 1)
        self._seal(sealed)
        return sealed

    def remove_log(self, log_id: int) -> int:
        """Delete a log (never the newest one) and its usage file; return the bytes freed. Raises OSError."""
        if log_id >= max(self._usage, default=0) or log_id == self.current_log_id:
            raise StorageError(f"entry log {log_id} is the newest one and cannot be removed")
        path = self.path(log_id)
        size = path.stat().st_size
        with self._lock:
            fd = self._fds.pop(log_id, None)
            self._unsynced.discard(log_id)
            self._written.pop(log_id, None)
            self._dropped.pop(log_id, None)
            self._synced_end.pop(log_id, None)
            if fd is not None and self._readers.get(log_id):
                self._retired[log_id], fd = fd, None
        if fd is not None:
            os.close(fd)
        path.unlink()
        usage_path(path).unlink(missing_ok=True)
        del self._usage[log_id]
        fsync_dir(self._dir)
        return size

    def adopt(self, log_ids: Iterable[int]) -> None:
        """Count logs written before this process started (so never fsync'd by it) as written since the last sync:
        journal replay indexed entries in them, which the next ``sync`` must make durable (``replay_in_place``).
        Raises OSError if a log cannot be opened."""
        for log_id in sorted(log_ids):
            self._read_fd(log_id)  # opens it: ``sync`` fsyncs the logs it has a descriptor of
            self._release_fd(log_id)
            with self._lock:
                self._unsynced.add(log_id)

    def sync(self, paced: bool = False) -> None:
        """fsync every log written since the last sync (and the directory if a log was created), then let
        the kernel drop the cached pages of what is durable, but for the last ``cache_window`` bytes. ``paced``
        (a checkpoint's): each log's bytes since its last sync are first written out a ``WRITE_OUT_STEP`` at a
        time (``files.write_out``)."""
        with self._lock:
            pending = sorted(self._unsynced)
            self._unsynced.clear()
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            synced = [(log_id, self._fds[log_id], self._written.get(log_id, 0))
                      for log_id in pending if log_id in self._fds]
        try:
            for log_id, fd, end in synced:
                if self._direct is not None:
                    self._direct.flush(log_id)
                if paced:
                    write_out(fd, self._synced_end.get(log_id, 0) & ~(_PAGE - 1), end, WRITE_OUT_STEP)
                os.fsync(fd)
            if dir_dirty:
                fsync_dir(self._dir)
        except OSError:
            with self._lock:
                self._unsynced.update(pending)
                self._dir_dirty = self._dir_dirty or dir_dirty
            raise
        for log_id, fd, end in synced:
            self._synced_end[log_id] = end
            self._drop_cached(log_id, fd, end)

    def _drop_cached(self, log_id: int, fd: int, durable_end: int) -> None:
        """Drop the page cache of a log's durable bytes older than the window, a megabyte at least at a time.

        Why: every new page-cache page costs a first touch, which in a VM whose free memory went back to
        the host (free page reporting) is several times the copy itself; pages dropped here are reused by
        the next appends instead. Reads of dropped ranges come from the disk. Clean pages only, so no
        data can be lost; a failure only costs memory."""
        upto = (durable_end - self._cache_window) & ~(_PAGE - 1)
        start = self._dropped.get(log_id, 0)
        if upto - start < _DROP_STEP:
            return
        self._dropped[log_id] = upto
        try:
            os.posix_fadvise(fd, start, upto - start, os.POSIX_FADV_DONTNEED)
        except OSError as exc:
            log.debug("cannot drop cached pages of entry log %s: %s", self.path(log_id), exc)

    def close(self) -> None:
        """Persist the current log's usage (so the next start need not scan it) and close every file."""
        # A failure to write staged records loses none: they are in the journal (see entry_log_direct); the files
        # are closed all the same (the storage's lock is released after this).
        try:
            if self._started and not self._closed:
                self._seal(self._log_id)
        except OSError as exc:
            log.error("entry log %s: writing its last records failed at close: %s", self.path(self._log_id), exc)
        if self._direct is not None:
            try:
                self._direct.release()
            except OSError as exc:
                log.error("entry log %s: writing its last records failed at close: %s", self.path(self._log_id), exc)
        with self._lock:
            fds, self._fds = list(self._fds.values()) + list(self._retired.values()), {}
            self._retired = {}
            self._closed = True
        for fd in fds:
            os.close(fd)

    def _start_log(self, log_id: int) -> None:
        fd = os.open(self.path(log_id), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        with self._lock:
            self._fds[log_id] = fd
            self._dir_dirty = True
        if self._direct is not None:
            direct_fd = open_direct(self.path(log_id))
            if direct_fd is None:
                log.warning("entry log %s: its file system does not do O_DIRECT; entry logs are written through "
                            "the page cache", self.path(log_id))
                self._direct.release()
                self._direct = None
            else:
                self._direct.begin(log_id, direct_fd)
        self._usage[log_id] = LogUsage()
        self._log_id, self._offset, self._started = log_id, 0, True
        self._writeback_from = 0
        self._ahead.new_log()

    def _seal(self, log_id: int) -> None:
        """Give back the blocks allocated past a log's records and persist its usage once nothing more goes into
        it; a failure only costs space, or a scan at the next start. Raises OSError if its staged records cannot
        be written."""
        if self._direct is not None:
            self._direct.finish(log_id)
        self._ahead.give_back(log_id, self._fds[log_id], self.path(log_id))
        try:
            write_usage(self.path(log_id), self._usage[log_id])
        except OSError as exc:
            log.warning("cannot persist the ledger map of entry log %s (%s); it is rebuilt at the next start",
                        self.path(log_id), exc)

    def _read_fd(self, log_id: int) -> int:
        """The log's fd, counted as in use until ``_release_fd`` (so removing the log cannot close it)."""
        with self._lock:
            fd = self._fds.get(log_id)
            if fd is None:
                if self._closed:
                    raise StorageError("the entry logger is closed")
                fd = os.open(self.path(log_id), os.O_RDONLY)
                self._fds[log_id] = fd
            self._readers[log_id] = self._readers.get(log_id, 0) + 1
            return fd

    def _release_fd(self, log_id: int) -> None:
        with self._lock:
            count = self._readers.get(log_id, 0) - 1
            if count > 0:
                self._readers[log_id] = count
                return
            self._readers.pop(log_id, None)
            fd = self._retired.pop(log_id, None)
        if fd is not None:
            os.close(fd)


def _read_record(read: Callable[[int, int], bytes], offset: int, length: int, ledger_id: int, entry_id: int,
                 what: str) -> tuple[bytes, bytes]:
    """Header and body of the record at ``offset``; ``read(size, offset)`` reads the log's bytes."""
    if length <= _SMALL_READ:
        record = read(HEADER_SIZE + length, offset)
        return record[:HEADER_SIZE], record[HEADER_SIZE:]
    # a large body is read only once the header confirms it: a damaged location (index) must not make the
    # bookie allocate whatever length it names
    header = read(HEADER_SIZE, offset)
    _check_header(header, ledger_id, entry_id, length, what)
    return header, read(length, offset + HEADER_SIZE)


def _load_usage(path: Path) -> LogUsage:
    usage, scanned = load_usage(path)
    if usage.pinned:
        log.error("%s", usage.pinned)
    elif scanned:
        log.info("entry log %s: rebuilt its ledger map by scanning it (%d ledgers)", path, len(usage.ledgers))
        try:
            write_usage(path, usage)
        except OSError as exc:
            log.warning("cannot persist the ledger map of entry log %s: %s", path, exc)
    return usage


def _remove_orphan_usage_files(directory: Path, log_ids: set[int]) -> None:
    """Usage files whose log is gone (a crash between the two unlinks of ``remove_log``)."""
    for log_id, path in numbered_files(directory, USAGE_SUFFIX):
        if log_id not in log_ids:
            path.unlink(missing_ok=True)


def _check_record(header: bytes, body: bytes, ledger_id: int, entry_id: int, length: int, what: str) -> None:
    _check_header(header, ledger_id, entry_id, length, what)
    if len(body) < length:
        raise CorruptStorageError(f"{what}: the entry log ends before the record does (truncated file)")
    (crc,) = _CRC.unpack_from(header, 4)
    if crc32c.crc32c(body, value=crc32c.crc32c(header[8:])) != crc:
        raise CorruptStorageError(f"{what}: checksum mismatch (the stored bytes are damaged)")


def _check_header(header: bytes, ledger_id: int, entry_id: int, length: int, what: str) -> None:
    if len(header) < HEADER_SIZE:
        raise CorruptStorageError(f"{what}: the entry log ends before the record does (truncated file)")
    if header[:4] != MAGIC:
        raise CorruptStorageError(f"{what}: no record magic (overwritten or misplaced data)")
    stored_ledger, stored_entry, stored_length = _FIXED.unpack_from(header, 8)
    if (stored_ledger, stored_entry, stored_length) != (ledger_id, entry_id, length):
        raise CorruptStorageError(
            f"{what}: the record there is ledger {stored_ledger} entry {stored_entry} of {stored_length} bytes"
        )
