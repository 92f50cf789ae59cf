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
that header, and its own bytes are the journal's body, byte for byte (so they
give that crc32c too: one comparison instead of a third crc32c pass). It holds
the journal's bytes, intact, where a read will check them. Those bytes may not be durable
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

import mmap
import os
import struct
from pathlib import Path

import crc32c

from bookie_server.entry_log import HEADER_SIZE, LOG_SUFFIX, MAGIC, EntryLocation
from bookie_server.entry_log_direct import padding_end
from bookie_server.files import numbered_files

LOOKAHEAD = 1024
GIVE_UP_AFTER = 64
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
        self._maps: dict[int, tuple[mmap.mmap | None, memoryview | None, int]] = {}  # index -> (map, view, size)
        self._misses = 0
        self._active = bool(self._logs)
        self.adopted: set[int] = set()
        self.matched = 0
        self._mapped, self._view, self._size = self._map(0) if self._logs else (None, None, 0)  # the cursor's log

    def match(self, ledger_id: int, entry_id: int, body) -> EntryLocation | None:
        """The location of an intact entry-log record holding exactly ``body`` for this entry, or None (a plain
        ``(log id, offset, length)`` tuple, the fields of ``EntryLocation``, as ``EntryLogger.append_batch``'s)."""
        if not self._active:
            return None
        length, index, offset = len(body), self._index, self._offset
        mapped, view, size = self._mapped, self._view, self._size
        unpack, crc = _HEADER.unpack_from, crc32c.crc32c
        for _ in range(LOOKAHEAD):
            if offset + HEADER_SIZE > size:
                skip = padding_end(view, offset, size)
                if skip is not None:  # zeros at a direct-written log's end (B9)
                    offset = skip
                    continue
                if offset < size or index + 1 >= len(self._logs):
                    break  # a cut header, or the end of the newest log
                index, offset = index + 1, 0
                mapped, view, size = self._map(index)
                continue
            magic, stored, found_ledger, found_entry, found_length = unpack(view, offset)
            end = offset + HEADER_SIZE + found_length
            if magic != MAGIC:
                skip = padding_end(view, offset, size)
                if skip is None:
                    break
                offset = skip  # zeros after a sync's end in a direct-written log (B9)
                continue
            if found_ledger == ledger_id and found_entry == entry_id and found_length == length:
                if end <= size:
                    fixed = crc(view[offset + _FIXED_AT:offset + HEADER_SIZE])
                    start = offset + HEADER_SIZE  # the same bytes as the body: find is a memcmp here
                    if crc(body, fixed) == stored and mapped.find(body, start, end) == start:
                        if index != self._index:
                            self._index, self._mapped, self._view, self._size = index, mapped, view, size
                        log_id = self._logs[index][0]
                        self._offset, self._misses = end, 0
                        self.matched += 1
                        self.adopted.add(log_id)
                        return log_id, offset, length
                break
            offset = end
        self._misses += 1  # the cursor stays: the next record may be right there
        if self._misses >= GIVE_UP_AFTER:
            self._active = False
        return None

    def close(self) -> None:
        self._active = False
        for mapped, view, _ in self._maps.values():
            if view is not None:
                view.release()
            if mapped is not None:
                try:
                    mapped.close()
                except BufferError:  # a view of it still lives (an exception's frame): unmapped when it goes
                    pass
        self._maps = {}
        self._mapped = self._view = None

    def _map(self, index: int) -> tuple[mmap.mmap | None, memoryview | None, int]:
        """The log at ``index`` mapped (read only), with a view and its size; (None, None, 0) if it cannot be."""
        found = self._maps.get(index)
        if found is None:
            found = (None, None, 0)
            try:
                with open(self._logs[index][1], "rb") as file:
                    size = os.fstat(file.fileno()).st_size
                    if size:
                        mapped = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ)
                        found = (mapped, memoryview(mapped), size)
            except (OSError, ValueError):
                pass
            self._maps[index] = found
        return found
