"""Which ledgers have entries in each entry log (and how many body bytes): the garbage collector's map.

``LogUsage`` is one log's map. The entry logger keeps one per log in memory:
it adds to the current log's map on every append; when a log is sealed
(the logger moves to a new log, or closes) its map is persisted next to it
as ``<id>.ledgers``::

    b"PLLU" | version u32 | log size u64 | count u32 | count x (ledger id u64, bytes u64) | crc32c u32

At start a log whose ``.ledgers`` file is missing, damaged or names another
size (the log that was being written when the bookie was killed) is rebuilt
by ``scan_entry_log``, which walks the log's records and checks each one's
checksum, stepping over the zeros a direct-written log leaves between a
sync's end and the next block (docs/protocol.md B9). A bad record followed by valid ones means the map cannot be
trusted: the log is ``pinned`` (never deleted nor compacted, logged once).
A bad record with nothing valid after it is the torn tail a crash leaves
(never acknowledged, never referenced) and is ignored.
"""
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Iterator, NamedTuple

import crc32c

from bookie_server.entry_log_direct import padding_end
from bookie_server.files import atomic_write

USAGE_SUFFIX = ".ledgers"
_MAGIC = b"PLLU"
_VERSION = 1
_HEAD = struct.Struct(">4sIQI")
_PAIR = struct.Struct(">QQ")
_CRC = struct.Struct(">I")
# The entry log's record layout (see entry_log.py): magic, crc, ledger id, entry id, body length, body.
_RECORD_MAGIC = b"PLEL"
_RECORD_HEAD = struct.Struct(">4sIQqI")


class LogRecord(NamedTuple):
    ledger_id: int
    entry_id: int
    offset: int  # of the record header
    length: int  # of the body
    body: bytes


class LogUsage:
    """Body bytes per ledger in one entry log; ``pinned`` says why the log must be kept whatever the map says."""

    __slots__ = ("ledgers", "pinned")

    def __init__(self, ledgers: dict[int, int] | None = None, pinned: str | None = None) -> None:
        self.ledgers = ledgers if ledgers is not None else {}
        self.pinned = pinned

    def add(self, ledger_id: int, nbytes: int) -> None:
        self.ledgers[ledger_id] = self.ledgers.get(ledger_id, 0) + nbytes

    @property
    def total_bytes(self) -> int:
        return sum(self.ledgers.values())


def usage_path(log_path: Path) -> Path:
    return log_path.with_suffix(USAGE_SUFFIX)


def write_usage(log_path: Path, usage: LogUsage) -> None:
    """Persist the sealed log's map (atomically, fsync'd). Raises OSError."""
    parts = [_HEAD.pack(_MAGIC, _VERSION, log_path.stat().st_size, len(usage.ledgers))]
    parts.extend(_PAIR.pack(ledger_id, nbytes) for ledger_id, nbytes in sorted(usage.ledgers.items()))
    data = b"".join(parts)
    atomic_write(usage_path(log_path), data + _CRC.pack(crc32c.crc32c(data)))


def read_usage(log_path: Path) -> LogUsage | None:
    """The persisted map of a sealed log, or None if there is none that matches the log as it is now."""
    try:
        data = usage_path(log_path).read_bytes()
        size = log_path.stat().st_size
    except FileNotFoundError:
        return None
    if len(data) < _HEAD.size + _CRC.size or _CRC.unpack_from(data, len(data) - 4)[0] != crc32c.crc32c(data[:-4]):
        return None
    magic, version, recorded_size, count = _HEAD.unpack_from(data)
    if magic != _MAGIC or version != _VERSION or recorded_size != size or len(data) != \
            _HEAD.size + count * _PAIR.size + _CRC.size:
        return None
    pairs = (_PAIR.unpack_from(data, _HEAD.size + index * _PAIR.size) for index in range(count))
    return LogUsage(dict(pairs))


def load_usage(log_path: Path) -> tuple[LogUsage, bool]:
    """The log's map, from its ``.ledgers`` file or else by scanning it; True if it was scanned."""
    usage = read_usage(log_path)
    if usage is not None:
        return usage, False
    usage = LogUsage()
    scan = EntryLogScan(log_path)
    for record in scan.records():
        usage.add(record.ledger_id, record.length)
    usage.pinned = scan.damage
    return usage, True


class EntryLogScan:
    """Walks an entry log's records, checksums checked; ``damage`` is set if the map after it is unknown."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.damage: str | None = None
        self.torn_bytes = 0

    def records(self) -> Iterator[LogRecord]:
        """Every intact record in order (call once; read ``damage`` after exhausting it)."""
        with open(self.path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size == 0:
                return
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                offset = 0
                while offset < size:
                    record = _parse(buf, offset, size)
                    if record is None:
                        skip = padding_end(buf, offset, size)
                        if skip is not None:
                            offset = skip
                            continue
                        self._bad_record(buf, offset, size)
                        return
                    yield record
                    offset += _RECORD_HEAD.size + record.length

    def _bad_record(self, buf: mmap.mmap, offset: int, size: int) -> None:
        position = buf.find(_RECORD_MAGIC, offset + 1)
        while position >= 0:
            if _parse(buf, position, size) is not None:
                self.damage = (f"entry log {self.path} has a damaged record at offset {offset} followed by valid "
                               f"ones at {position}; it is kept (not garbage collected) until repaired")
                return
            position = buf.find(_RECORD_MAGIC, position + 1)
        self.torn_bytes = size - offset


def _parse(buf: mmap.mmap, offset: int, size: int) -> LogRecord | None:
    if size - offset < _RECORD_HEAD.size:
        return None
    magic, crc, ledger_id, entry_id, length = _RECORD_HEAD.unpack_from(buf, offset)
    end = offset + _RECORD_HEAD.size + length
    if magic != _RECORD_MAGIC or end > size:
        return None
    covered = buf[offset + 8:end]
    if crc32c.crc32c(covered) != crc:
        return None
    return LogRecord(ledger_id, entry_id, offset, length, covered[_RECORD_HEAD.size - 8:])
