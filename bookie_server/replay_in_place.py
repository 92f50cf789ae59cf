"""Replay without re-writing: find a replayed ADD record's body already in an entry log, intact.

The add path appends an entry's body to the entry log and submits its
journal record under one lock, so the entry logs hold the bodies of the
journal's ADD records in journal order (interleaved with bodies whose
journal record is an ADD_REF, and with compaction's copies). Replay walks the
entry logs with a cursor beside the journal: for each ADD record it looks at
the entry-log record under the cursor, and at most ``LOOKAHEAD`` records
after it, for the same ledger id, entry id and body length.

Rule (what makes indexing that record instead of appending the body again
safe): the entry-log record is used only if its header names the same
entry, its stored crc32c equals the crc32c the journal's body gives under
that header, and its own bytes give that crc32c too, so it holds the journal's
bytes, intact, where a read will check them. Those bytes may not be durable
yet (the entry logs are fsync'd by checkpoints, and the crashed process may
not have reached one), but neither is a body appended again by replay: the
logs holding entries indexed in place are handed to ``EntryLogger.adopt``,
so the next checkpoint fsyncs them before it moves the journal mark past
their records (docs/protocol.md B2), and until then the journal keeps the
bodies. Anything else (no such record, a torn or damaged one, other bytes)
is not damage: the body is appended again from the journal, as before.

Where the cursor starts: for a journal replayed from its beginning, the
oldest entry log; else the entry-log position the checkpoint that persisted
the mark saw (``replay_hint``), or nowhere (no in-place replay). A wrong
start costs only misses: after ``GIVE_UP_AFTER`` misses in a row the matcher
stops looking.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c

from bookie_server.entry_log import HEADER_SIZE, LOG_SUFFIX, MAGIC, EntryLocation
from bookie_server.files import numbered_files

LOOKAHEAD = 64
GIVE_UP_AFTER = 256
WINDOW_BYTES = 8 * 1024 * 1024
_HEADER = struct.Struct(">4sIQqI")  # magic, crc32c, ledger id, entry id, body length
_FIXED_AT = 8


class InPlaceMatcher:
    """Finds journal bodies in the entry logs of ``directory`` from ``start`` ((log id, offset)) on; ``adopted``
    lists the logs holding entries it matched. Close it after the replay."""

    def __init__(self, directory: Path, start: tuple[int, int] | None) -> None:
        self._logs = [] if start is None else [(log_id, path) for log_id, path in
                                                 numbered_files(directory, LOG_SUFFIX) if log_id >= start[0]]
        self._index = 0  # the cursor: a position in self._logs[self._index]
        self._offset = start[1] if self._logs and self._logs[0][0] == start[0] else 0
        self._files: dict[int, tuple[int, int]] = {}  # index in self._logs -> (fd, size); fd -1: unreadable
        self._buffer = bytearray(WINDOW_BYTES)
        self._view = memoryview(self._buffer)
        self._window_at = (-1, 0, 0)  # the window holds bytes [base, base + filled) of the log at this index
        self._misses = 0
        self._active = bool(self._logs)
        self.adopted: set[int] = set()
        self.matched = 0

    def match(self, ledger_id: int, entry_id: int, body) -> EntryLocation | None:
        """The location of an intact entry-log record holding exactly ``body`` for this entry, or None."""
        if not self._active:
            return None
        length = len(body)
        saved = (self._index, self._offset)
        for _ in range(LOOKAHEAD):
            header = self._header()
            if header is None:
                break
            magic, stored, found_ledger, found_entry, found_length = header
            if magic != MAGIC:
                break
            if found_ledger == ledger_id and found_entry == entry_id and found_length == length:
                location = self._verify(stored, body, length)
                if location is not None:
                    self._misses = 0
                    self.matched += 1
                    return location
                break
            self._offset += HEADER_SIZE + found_length
        self._index, self._offset = saved
        self._misses += 1
        if self._misses >= GIVE_UP_AFTER:
            self._active = False
        return None

    def close(self) -> None:
        for fd, _ in self._files.values():
            if fd >= 0:
                os.close(fd)
        self._files = {}
        self._active = False
        self._view.release()

    def _verify(self, stored: int, body, length: int) -> EntryLocation | None:
        offset = self._offset
        record = self._window(offset, HEADER_SIZE + length)
        if record is None:
            return None
        fixed = crc32c.crc32c(record[_FIXED_AT:HEADER_SIZE])
        if crc32c.crc32c(body, fixed) != stored or crc32c.crc32c(record[HEADER_SIZE:], fixed) != stored:
            return None
        log_id = self._logs[self._index][0]
        self._offset = offset + HEADER_SIZE + length
        self.adopted.add(log_id)
        return EntryLocation(log_id, offset, length)

    def _header(self) -> tuple | None:
        """The record header under the cursor (moving to the next log at a log's end), None past the last log."""
        while self._offset + HEADER_SIZE > self._file()[1]:
            if self._offset < self._file()[1] or self._index + 1 >= len(self._logs):
                return None  # a cut header, or the end of the newest log
            self._index += 1
            self._offset = 0
        window = self._window(self._offset, HEADER_SIZE)
        return None if window is None else _HEADER.unpack_from(window)

    def _window(self, offset: int, length: int) -> memoryview | None:
        """``length`` bytes of the cursor's log at ``offset`` (read into the window when they are not in it)."""
        fd, size = self._file()
        if offset + length > size:
            return None
        index, base, filled = self._window_at
        if index != self._index or offset < base or offset + length > base + filled:
            if length > len(self._buffer):
                self._view.release()
                self._buffer = bytearray(length)
                self._view = memoryview(self._buffer)
            want, filled = min(len(self._buffer), size - offset), 0
            while filled < want:
                count = os.preadv(fd, [self._view[filled:want]], offset + filled)
                if count <= 0:
                    break
                filled += count
            self._window_at = (self._index, offset, filled)
            base = offset
            if length > filled:
                return None
        return self._view[offset - base:offset - base + length]

    def _file(self) -> tuple[int, int]:
        """(fd, size) of the cursor's log, opened on first use; (-1, 0) if it cannot be read."""
        found = self._files.get(self._index)
        if found is None:
            try:
                fd = os.open(self._logs[self._index][1], os.O_RDONLY)
                found = (fd, os.fstat(fd).st_size)
            except OSError:
                found = (-1, 0)
            self._files[self._index] = found
        return found
