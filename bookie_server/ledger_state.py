"""Per-ledger state on a bookie (master key, fenced, LAC, last entry) and its checkpoint snapshot.

The state changes in memory as records are applied (live or replayed); it
is made durable by the journal (LEDGER_KEY / FENCE / ADD records) and, at
each checkpoint, by an atomically replaced snapshot file::

    b"PLLS" | version u32 | count u32 | count x record | crc32c u32 of all before
    record = ledger id u64 | fenced u8 | LAC i64 | last entry id i64 | key length u16 | key

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

import crc32c

from bookie_server.files import atomic_write
from pyspark_ledger.errors import CorruptStorageError, StorageError

MAGIC = b"PLLS"
VERSION = 1
MAX_KEY_BYTES = 0xFFFF
_HEAD = struct.Struct(">4sII")
_RECORD = struct.Struct(">QBqqH")
_CRC = struct.Struct(">I")


class LedgerRecord:
    """One ledger's state; ``written_at`` (not persisted) is the monotonic time this process last stored an
    entry of it, 0.0 if it has not (garbage collection of over-replicated ledgers leaves recent ones alone)."""

    __slots__ = ("master_key", "fenced", "last_add_confirmed", "last_entry_id", "written_at")

    def __init__(self, master_key: bytes, fenced: bool = False, last_add_confirmed: int = -1,
                 last_entry_id: int = -1) -> None:
        self.master_key = master_key
        self.fenced = fenced
        self.last_add_confirmed = last_add_confirmed
        self.last_entry_id = last_entry_id
        self.written_at = 0.0


class LedgerStates:
    """Every ledger this bookie knows, by id."""

    def __init__(self, records: dict[int, LedgerRecord] | None = None) -> None:
        self._records = records if records is not None else {}
        self._dirty = False

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

    def snapshot(self) -> bytes | None:
        """The encoded state if it changed since the last snapshot, else None."""
        if not self._dirty:
            return None
        self._dirty = False
        parts = [_HEAD.pack(MAGIC, VERSION, len(self._records))]
        for ledger_id, record in self._records.items():
            parts.append(_RECORD.pack(ledger_id, record.fenced, record.last_add_confirmed,
                                      record.last_entry_id, len(record.master_key)))
            parts.append(record.master_key)
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
        return cls(_decode(path, data))


def _decode(path: Path, data: bytes) -> dict[int, LedgerRecord]:
    damaged = f"ledger state snapshot {path} is damaged"
    if len(data) < _HEAD.size + _CRC.size or _CRC.unpack_from(data, len(data) - 4)[0] != crc32c.crc32c(data[:-4]):
        raise CorruptStorageError(f"{damaged} (checksum mismatch); restore the data directory from a replica")
    magic, version, count = _HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise CorruptStorageError(f"{damaged} (magic {magic!r}, version {version}; expected version {VERSION})")
    records = {}
    offset = _HEAD.size
    try:
        for _ in range(count):
            ledger_id, fenced, lac, last_entry, key_length = _RECORD.unpack_from(data, offset)
            offset += _RECORD.size
            key = data[offset:offset + key_length]
            offset += key_length
            records[ledger_id] = LedgerRecord(key, bool(fenced), lac, last_entry)
    except struct.error as exc:
        raise CorruptStorageError(f"{damaged} (record {len(records)} is cut short)") from exc
    return records
