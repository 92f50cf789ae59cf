"""Fast sequential decoding of a journal file for replay: large reads, many records per buffer.

``scan_records`` reads the file from an offset in chunks of ``CHUNK_BYTES``
into one reused buffer and decodes every record in it, with the same checks
as ``journal_format.parse_record`` (magic, length within the file, known
kind, crc32c over the record, payload size), until the first record that
fails one of them: it returns that record's offset and leaves the verdict
(torn tail or damage, see ``journal_replay``) to the caller, which looks at
the file around it the slow way. So a clean file is read once, in large
reads, and decoded without copying bodies: an ADD record's body is handed
over as a ``memoryview`` of the buffer, valid only during the call (copy it
to keep it).
"""
from __future__ import annotations

import os
import struct
from typing import Callable

import crc32c

from bookie_server.journal_format import (ADD, FRAMING_KINDS, HEADER_SIZE, KINDS, MAGIC, MAX_PAYLOAD,
                                          JournalRecord, parse_record)

CHUNK_BYTES = 8 * 1024 * 1024
_HEADER = struct.Struct(">4sIIB")  # magic, crc32c, length, kind
_ADD_IDS = struct.Struct(">Qq")
_ADD_MIN = _ADD_IDS.size

OnAdd = Callable[[int, int, memoryview], None]
OnRecord = Callable[[JournalRecord], None]


def scan_records(fd: int, start: int, size: int, on_add: OnAdd | None, on_record: OnRecord,
                 chunk_bytes: int = CHUNK_BYTES) -> tuple[int, int]:
    """Decode the records of ``fd`` from ``start`` up to ``size``: ADD records go to ``on_add(ledger id, entry id,
    body)`` (to ``on_record`` if ``on_add`` is None), other data records (not framing) to ``on_record``. Returns
    (the offset of the first record that does not parse, or ``size``; how many data records were applied)."""
    buffer = bytearray(max(chunk_bytes, HEADER_SIZE))
    view = memoryview(buffer)
    base, filled, pos, applied = start, 0, 0, 0  # the buffer holds the file's bytes [base, base + filled)
    unpack_header, unpack_ids, crc = _HEADER.unpack_from, _ADD_IDS.unpack_from, crc32c.crc32c
    advise(fd, start, chunk_bytes)
    try:
        while base + pos < size:
            if filled - pos < HEADER_SIZE:
                buffer, view, base, filled, pos = _refill(fd, buffer, view, base, filled, pos, HEADER_SIZE, size)
                if filled - pos < HEADER_SIZE:
                    return base + pos, applied  # a header cut by the end of the file
            magic, stored, length, kind = unpack_header(buffer, pos)
            end = pos + HEADER_SIZE + length
            if magic != MAGIC or length > MAX_PAYLOAD or base + end > size or kind not in KINDS:
                return base + pos, applied
            if end > filled:
                buffer, view, base, filled, pos = _refill(fd, buffer, view, base, filled, pos,
                                                          HEADER_SIZE + length, size)
                end = pos + HEADER_SIZE + length
                if end > filled:  # the file shrank under us
                    return base + pos, applied
            if crc(view[pos + 8:end]) != stored:
                return base + pos, applied
            if kind == ADD and length >= _ADD_MIN and on_add is not None:
                ledger_id, entry_id = unpack_ids(buffer, pos + HEADER_SIZE)
                on_add(ledger_id, entry_id, view[pos + HEADER_SIZE + _ADD_MIN:end])
                applied += 1
            else:  # small records: the reference decoder (it also checks their payload sizes)
                record = parse_record(view[pos:end], 0, end - pos)
                if not isinstance(record, JournalRecord):
                    return base + pos, applied
                if kind not in FRAMING_KINDS:
                    on_record(JournalRecord(kind, record.ledger_id, record.entry_id, bytes(record.data), base + end,
                                            record.reference, record.commit))
                    applied += 1
            pos = end
        return size, applied
    finally:
        view.release()


def advise(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to read ``[offset, offset + length)`` ahead (a hint: failures do not matter)."""
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
    except (OSError, AttributeError):
        pass


def _refill(fd: int, buffer: bytearray, view: memoryview, base: int, filled: int, pos: int, need: int,
            size: int) -> tuple[bytearray, memoryview, int, int, int]:
    """Move the unread bytes to the front (growing the buffer if ``need`` bytes do not fit) and read after them
    until ``need`` bytes from ``pos`` are in, or the file ends."""
    rest = filled - pos
    if need > len(buffer):
        grown = bytearray(need)
        grown[:rest] = view[pos:filled]
        view.release()
        buffer, view = grown, memoryview(grown)
    elif rest:
        view[:rest] = view[pos:filled]
    base, filled, pos = base + pos, rest, 0
    want = min(len(buffer), size - base)
    while filled < want:
        count = os.preadv(fd, [view[filled:want]], base + filled)
        if count <= 0:
            break
        filled += count
    advise(fd, base + filled, len(buffer))
    return buffer, view, base, filled, pos
