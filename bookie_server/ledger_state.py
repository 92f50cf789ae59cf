"""Per-ledger state on a bookie (master key, fenced, LAC, last entry) and its checkpoint snapshot.

The state changes in memory as records are applied (live or replayed); it
is made durable by the journal (LEDGER_KEY / FENCE / ADD records) and, at
each checkpoint, by an atomically replaced snapshot file::

    b"PLLS" | version u32 | count u32 | count x record | crc32c u32 of all before
    record = ledger id u64 | fenced u8 | LAC i64 | last entry id i64 | key length u16 | key
             | index pages u64 (version 2)

``index pages`` is how many page records the ledger's index file durably
holds (2**64-1: unknown), written by the checkpoint after the index pages
were fsync'd and before the journal mark moves: it is how the index tells a
truncated file from a short one (see ``index``). Version 1 snapshots (no
count) are read with every count unknown.

Every change is monotonic (a ledger is created once with its key, fenced
only goes to True, LAC and last entry only grow), which is what makes
replaying journal records on top of a newer snapshot harmless. The one
exception is ``remove`` (garbage collection of a ledger deleted from the
metadata store): see ``storage_gc`` for why replay cannot bring back a
removed ledger in a broken state.
Not thread-safe: the storage lock serialises every call.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable

import crc32c

from bookie_server.files import atomic_write
from pyspark_ledger.errors import CorruptStorageError, StorageError

MAGIC = b"PLLS"
VERSION = 2
MAX_KEY_BYTES = 0xFFFF
_HEAD = struct.Struct(">4sII")
_RECORD = struct.Struct(">QBqqH")
_PAGES = struct.Struct(">Q")
UNKNOWN_PAGES = (1 << 64) - 1
_CRC = struct.Struct(">I")


class LedgerRecord:
    """One ledger's state; ``written_at`` (not persisted) is the monotonic time this process last stored an
    entry of it, 0.0 if it has not (garbage collection of over-replicated ledgers leaves recent ones alone).
    ``fence_durable`` (not persisted): the fence is on disk -- loaded fenced from the fsync'd state snapshot, or
    its journal record fsync'd by this process -- so a further fence needs no journal record (docs/protocol.md
    F5). A fence only replayed from the journal is not counted: the next fence writes and fsyncs it again."""

    __slots__ = ("master_key", "fenced", "last_add_confirmed", "last_entry_id", "written_at", "fence_durable")

    def __init__(self, master_key: bytes, fenced: bool = False, last_add_confirmed: int = -1,
                 last_entry_id: int = -1) -> None:
        self.master_key = master_key
        self.fenced = fenced
        self.last_add_confirmed = last_add_confirmed
        self.last_entry_id = last_entry_id
        self.written_at = 0.0
        self.fence_durable = fenced  # a record built fenced was read from the snapshot


class LedgerStates:
    """Every ledger this bookie knows, by id."""

    def __init__(self, records: dict[int, LedgerRecord] | None = None,
                 index_pages: dict[int, int | None] | None = None) -> None:
        self._records = records if records is not None else {}
        self._dirty = False
        #: as loaded: ledger -> index page records its file durably holds (None: unknown)
        self.index_pages: dict[int, int | None] = index_pages if index_pages is not None else {}

    def __len__(self) -> int:
        return len(self._records)

    def get(self, ledger_id: int) -> LedgerRecord | None:
        return self._records.get(ledger_id)

    def create(self, ledger_id: int, master_key: bytes) -> LedgerRecord:
        record = self._records[ledger_id] = LedgerRecord(bytes(master_key))
        self._dirty = True
        return record

    def ids(self) -> set[int]:
        return set(self._records)

    def remove(self, ledger_id: int) -> bool:
        """Forget the ledger (garbage collection); False if it was not known."""
        if self._records.pop(ledger_id, None) is None:
            return False
        self._dirty = True
        return True

    def fence(self, record: LedgerRecord) -> None:
        if not record.fenced:
            record.fenced = True
            self._dirty = True

    def record_entry(self, record: LedgerRecord, entry_id: int, last_add_confirmed: int) -> bool:
        """Note a stored entry; return True if the ledger's LAC went up."""
        self._dirty = True
        if entry_id > record.last_entry_id:
            record.last_entry_id = entry_id
        if last_add_confirmed > record.last_add_confirmed:
            record.last_add_confirmed = last_add_confirmed
            return True
        return False

    @property
    def dirty(self) -> bool:
        return self._dirty

    def snapshot(self, index_pages: Callable[[int], int | None] = lambda ledger_id: None,
                 force: bool = False) -> bytes | None:
        """The encoded state if it changed since the last snapshot (or ``force``), else None;
        ``index_pages(ledger id)`` is the count of durable index page records (None: unknown)."""
        if not self._dirty and not force:
            return None
        self._dirty = False
        parts = [_HEAD.pack(MAGIC, VERSION, len(self._records))]
        for ledger_id, record in self._records.items():
            parts.append(_RECORD.pack(ledger_id, record.fenced, record.last_add_confirmed,
                                      record.last_entry_id, len(record.master_key)))
            parts.append(record.master_key)
            pages = index_pages(ledger_id)
            parts.append(_PAGES.pack(UNKNOWN_PAGES if pages is None else pages))
        data = b"".join(parts)
        return data + _CRC.pack(crc32c.crc32c(data))

    def mark_dirty(self) -> None:
        """Call when a snapshot could not be persisted, so the next checkpoint writes it again."""
        self._dirty = True

    @staticmethod
    def persist(path: Path, snapshot: bytes) -> None:
        atomic_write(path, snapshot)

    @classmethod
    def load(cls, path: Path) -> LedgerStates:
        """The state of the last checkpoint, or an empty one if there was none."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls()
        except OSError as exc:
            raise StorageError(f"cannot read the ledger state snapshot {path}: {exc}") from exc
        return cls(*_decode(path, data))


def _decode(path: Path, data: bytes) -> tuple[dict[int, LedgerRecord], dict[int, int | None]]:
    damaged = f"ledger state snapshot {path} is damaged"
    if len(data) < _HEAD.size + _CRC.size or _CRC.unpack_from(data, len(data) - 4)[0] != crc32c.crc32c(data[:-4]):
        raise CorruptStorageError(f"{damaged} (checksum mismatch); restore the data directory from a replica")
    magic, version, count = _HEAD.unpack_from(data)
    if magic != MAGIC or version not in (1, VERSION):
        raise CorruptStorageError(f"{damaged} (magic {magic!r}, version {version}; expected version {VERSION})")
    records, index_pages = {}, {}
    offset = _HEAD.size
    try:
        for _ in range(count):
            ledger_id, fenced, lac, last_entry, key_length = _RECORD.unpack_from(data, offset)
            offset += _RECORD.size
            key = data[offset:offset + key_length]
            offset += key_length
            pages = None
            if version >= 2:
                pages = _PAGES.unpack_from(data, offset)[0]
                offset += _PAGES.size
            if len(key) != key_length:
                raise struct.error("key cut short")
            records[ledger_id] = LedgerRecord(key, bool(fenced), lac, last_entry)
            index_pages[ledger_id] = None if pages == UNKNOWN_PAGES else pages
    except struct.error as exc:
        raise CorruptStorageError(f"{damaged} (record {len(records)} is cut short)") from exc
    return records, index_pages
