"""Entry logs: the entries of all ledgers, interleaved in large append-only files.

Each record is::

    0  magic  b"PLEL"
    4  crc32c u32 big-endian over bytes 8 .. end of record
    8  ledger id u64, 16 entry id i64, 24 body length u32
    28 body

A batch of records goes to the kernel with one ``writev`` (page cache only);
``sync`` fsyncs every log written since the previous sync: at checkpoint time,
and before each journal group commit when the journal holds references
instead of entry bodies (``StorageConfig.journal_write_data`` off).
A new log is started by the first append after open and when the current one reaches
``entry_log_size``. Reads check the record's ids and checksum and raise
``CorruptStorageError`` when they do not match.
"""
from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple, Sequence

import crc32c

from bookie_server.files import Buffer, fsync_dir, numbered_files, numbered_name, write_all
from pyspark_ledger.errors import CorruptStorageError, StorageError

MAGIC = b"PLEL"
LOG_SUFFIX = ".log"
HEADER_SIZE = 28
_CRC = struct.Struct(">I")
_FIXED = struct.Struct(">QqI")
_SMALL_READ = 64 * 1024  # below this, header and body are read with one pread


class EntryLocation(NamedTuple):
    log_id: int
    offset: int  # of the record header
    length: int  # of the body


class EntryLogger:
    """Appends entries to ``<dir>/<id>.log`` files and reads them back by location.

    ``append_batch`` must be called by one thread at a time (the storage lock);
    ``read`` and ``sync`` may run concurrently with it.
    """

    def __init__(self, directory: Path, max_log_size: int) -> None:
        self._dir = directory
        self._max_size = max_log_size
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}
        self._unsynced: set[int] = set()
        self._dir_dirty = False
        self._closed = False
        existing = numbered_files(directory, LOG_SUFFIX)
        self._log_id = (existing[-1][0] if existing else 0) + 1  # created at the first append
        self._offset = 0
        self._started = False

    def path(self, log_id: int) -> Path:
        return self._dir / numbered_name(log_id, LOG_SUFFIX)

    def append_batch(self, entries: Sequence[tuple[int, int, Buffer]]) -> list[EntryLocation]:
        """Append (ledger id, entry id, body) records in one write; return their locations.

        Raises OSError; after a failure the log's tail is undefined, so the
        caller must stop appending (the storage becomes read-only).
        """
        if not self._started or self._offset >= self._max_size:
            self._start_log(self._log_id + 1 if self._started else self._log_id)
        chunks: list[Buffer] = []
        locations = []
        offset = self._offset
        for ledger_id, entry_id, body in entries:
            fixed = _FIXED.pack(ledger_id, entry_id, len(body))
            crc = crc32c.crc32c(body, value=crc32c.crc32c(fixed))
            chunks.append(MAGIC + _CRC.pack(crc) + fixed)
            chunks.append(body)
            locations.append(EntryLocation(self._log_id, offset, len(body)))
            offset += HEADER_SIZE + len(body)
        write_all(self._fds[self._log_id], chunks)
        self._offset = offset
        with self._lock:  # only after the write: a sync that cleared the set before it must not cover it
            self._unsynced.add(self._log_id)
        return locations

    def read(self, location: EntryLocation, ledger_id: int, entry_id: int) -> bytes:
        """The body stored at ``location``; CorruptStorageError if it is not that entry, intact."""
        log_id, offset, length = location
        what = f"ledger {ledger_id} entry {entry_id} in entry log {self.path(log_id)} at offset {offset}"
        try:
            fd = self._read_fd(log_id)
            if length <= _SMALL_READ:
                record = os.pread(fd, HEADER_SIZE + length, offset)
                header, body = record[:HEADER_SIZE], record[HEADER_SIZE:]
            else:
                header = os.pread(fd, HEADER_SIZE, offset)
                body = os.pread(fd, length, offset + HEADER_SIZE)
        except FileNotFoundError as exc:
            raise CorruptStorageError(f"{what}: the entry log file is missing") from exc
        except OSError as exc:
            raise StorageError(f"reading {what} failed: {exc}") from exc
        _check_record(header, body, ledger_id, entry_id, length, what)
        return body

    def sync(self) -> None:
        """fsync every log written since the last sync (and the directory if a log was created)."""
        with self._lock:
            pending = sorted(self._unsynced)
            self._unsynced.clear()
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            fds = [self._fds[log_id] for log_id in pending]
        try:
            for fd in fds:
                os.fsync(fd)
            if dir_dirty:
                fsync_dir(self._dir)
        except OSError:
            with self._lock:
                self._unsynced.update(pending)
                self._dir_dirty = self._dir_dirty or dir_dirty
            raise

    def close(self) -> None:
        with self._lock:
            fds, self._fds = list(self._fds.values()), {}
            self._closed = True
        for fd in fds:
            os.close(fd)

    def _start_log(self, log_id: int) -> None:
        fd = os.open(self.path(log_id), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        with self._lock:
            self._fds[log_id] = fd
            self._dir_dirty = True
        self._log_id, self._offset, self._started = log_id, 0, True

    def _read_fd(self, log_id: int) -> int:
        with self._lock:
            fd = self._fds.get(log_id)
            if fd is not None:
                return fd
            if self._closed:
                raise StorageError("the entry logger is closed")
            fd = os.open(self.path(log_id), os.O_RDONLY)
            self._fds[log_id] = fd
            return fd


def _check_record(header: bytes, body: bytes, ledger_id: int, entry_id: int, length: int, what: str) -> None:
    if len(header) < HEADER_SIZE or len(body) < length:
        raise CorruptStorageError(f"{what}: the entry log ends before the record does (truncated file)")
    if header[:4] != MAGIC:
        raise CorruptStorageError(f"{what}: no record magic (overwritten or misplaced data)")
    stored_ledger, stored_entry, stored_length = _FIXED.unpack_from(header, 8)
    if (stored_ledger, stored_entry, stored_length) != (ledger_id, entry_id, length):
        raise CorruptStorageError(
            f"{what}: the record there is ledger {stored_ledger} entry {stored_entry} of {stored_length} bytes"
        )
    (crc,) = _CRC.unpack_from(header, 4)
    if crc32c.crc32c(body, value=crc32c.crc32c(header[8:])) != crc:
        raise CorruptStorageError(f"{what}: checksum mismatch (the stored bytes are damaged)")
