"""The journal's record format: encoding for the writer, parsing and resynchronising for replay.

A journal file is a sequence of records, each::

    0  magic  b"PLJR"
    4  crc32c u32 big-endian over bytes 8 .. end of record
    8  length u32: bytes after the 13-byte header
    12 kind   u8
    13 payload (length bytes)

Payloads: ADD = ledger id u64, entry id i64, entry body; ADD_REF = ledger
id u64, entry id i64, LAC i64, entry log id u64, offset u64, body length u32
(the body itself is in that entry log, fsync'd before this record was
written); LEDGER_KEY and FENCE = ledger id u64, master key. A ledger's
LEDGER_KEY record precedes its first ADD or ADD_REF; a FENCE record also
creates the ledger if needed, so it carries the key.

Format versions. Version 1 files hold only the records above. Version 2
files (written since) start with a FILE_HEADER record (payload: version u16)
and end every group commit with a COMMIT record (payload: the group's record
count u32 and its byte length u64, the COMMIT record excluded), written in the
same ``writev`` as the group; the group's adds are acknowledged only after
that write is fsync'd. A valid COMMIT record after a damaged one therefore
proves that the damaged record was fsync'd, so acknowledged: replay tells a
torn last group (no COMMIT after the damage: never acknowledged) from damage to
acknowledged records (see ``journal_replay``). Version 1 files replay as they
always did.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable

import crc32c

from bookie_server.files import Buffer

MAGIC = b"PLJR"
ADD = 1
LEDGER_KEY = 2
FENCE = 3
ADD_REF = 4
COMMIT = 5  # version 2: ends a group commit
FILE_HEADER = 6  # version 2: the first record of a file
KINDS = (ADD, LEDGER_KEY, FENCE, ADD_REF, COMMIT, FILE_HEADER)
FRAMING_KINDS = (COMMIT, FILE_HEADER)  # structure, not data: replay does not apply them
VERSION = 2

HEADER_SIZE = 13
MAX_PAYLOAD = 2**31  # bigger lengths are corruption, not data
_CRC = struct.Struct(">I")
_LENGTH_KIND = struct.Struct(">IB")
_ADD_FIXED = struct.Struct(">IBQq")  # length, kind, ledger id, entry id
_LEDGER_ID = struct.Struct(">Q")
_ENTRY_IDS = struct.Struct(">Qq")
_REF = struct.Struct(">QqqQQI")  # ledger id, entry id, LAC, entry log id, offset, body length
_REF_COVERED = struct.Struct(">IBQqqQQI")  # length, kind, then the ADD_REF payload
_MAGIC_CRC = struct.Struct(">4sI")
_crc = crc32c.crc32c
_COMMIT = struct.Struct(">IQ")  # records in the group, bytes of the group
_COMMIT_COVERED = struct.Struct(">IBIQ")  # length, kind, then the COMMIT payload
_VERSION = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class JournalRecord:
    kind: int
    ledger_id: int
    entry_id: int  # -1 unless kind == ADD
    data: bytes  # the entry body (ADD) or the master key; empty for ADD_REF
    end: int  # file offset just after this record
    reference: "EntryReference | None" = None  # ADD_REF only
    commit: "GroupCommit | None" = None  # COMMIT only


@dataclass(frozen=True, slots=True)
class GroupCommit:
    """A COMMIT record's payload: the group before it has ``records`` records in ``length`` bytes."""

    records: int
    length: int


@dataclass(frozen=True, slots=True)
class EntryReference:
    """Where an ADD_REF record's entry is: the entry log record (log id, offset) and its body length."""

    last_add_confirmed: int
    log_id: int
    offset: int
    length: int


def encode_add(ledger_id: int, entry_id: int, body: Buffer) -> list[Buffer]:
    """The record of one add, as chunks for ``writev`` (the body is not copied)."""
    fixed = _ADD_FIXED.pack(_ENTRY_IDS.size + len(body), ADD, ledger_id, entry_id)
    return [_MAGIC_CRC.pack(MAGIC, _crc(body, _crc(fixed))) + fixed, body]  # (positional: a keyword costs more)


def encode_add_ref(ledger_id: int, entry_id: int, last_add_confirmed: int, log_id: int, offset: int,
                   length: int) -> bytes:
    """The record of one add whose body is already durable in an entry log."""
    covered = _REF_COVERED.pack(_REF.size, ADD_REF, ledger_id, entry_id, last_add_confirmed, log_id, offset, length)
    return _MAGIC_CRC.pack(MAGIC, crc32c.crc32c(covered)) + covered


def encode_add_refs(entries: Iterable[tuple], locations: Iterable[tuple[int, int, int]]) -> bytearray:
    """The ADD_REF records of a batch, in one buffer: ``entries`` are (_, ledger id, entry id, _, LAC)
    tuples (``StoredEntry``-shaped) and ``locations`` their (entry log id, offset, length)."""
    records = bytearray()
    pack_covered, pack_head, crc = _REF_COVERED.pack, _MAGIC_CRC.pack, crc32c.crc32c
    for (_, ledger_id, entry_id, _, lac), (log_id, offset, length) in zip(entries, locations):
        covered = pack_covered(_REF.size, ADD_REF, ledger_id, entry_id, lac, log_id, offset, length)
        records += pack_head(MAGIC, crc(covered))
        records += covered
    return records


def encode_commit(records: int, length: int) -> bytes:
    """The COMMIT record that ends a group commit of ``records`` records in ``length`` bytes."""
    covered = _COMMIT_COVERED.pack(_COMMIT.size, COMMIT, records, length)
    return _MAGIC_CRC.pack(MAGIC, crc32c.crc32c(covered)) + covered


def encode_file_header() -> bytes:
    """The first record of a version 2 journal file."""
    return _encode_small(FILE_HEADER, _VERSION.pack(VERSION))


def file_version(buf: Buffer, size: int) -> int:
    """The format version of a journal file: 2 if it starts with a valid FILE_HEADER or holds a valid COMMIT
    record anywhere (its header damaged), else 1."""
    first = parse_record(buf, 0, size)
    if isinstance(first, JournalRecord) and first.kind == FILE_HEADER:
        return first.entry_id
    return VERSION if find_next_record(buf, 0, size, COMMIT) is not None else 1


def encode_ledger_key(ledger_id: int, master_key: bytes) -> bytes:
    return _encode_small(LEDGER_KEY, _LEDGER_ID.pack(ledger_id) + master_key)


def encode_fence(ledger_id: int, master_key: bytes) -> bytes:
    return _encode_small(FENCE, _LEDGER_ID.pack(ledger_id) + master_key)


def _encode_small(kind: int, payload: bytes) -> bytes:
    covered = _LENGTH_KIND.pack(len(payload), kind) + payload
    return MAGIC + _CRC.pack(crc32c.crc32c(covered)) + covered


def parse_record(buf: Buffer, offset: int, size: int) -> JournalRecord | str:
    """The record at ``offset`` of ``buf[:size]``, or a string saying why there is none."""
    if size - offset < HEADER_SIZE:
        return f"only {size - offset} bytes left, a record header needs {HEADER_SIZE}"
    if buf[offset:offset + 4] != MAGIC:
        return "no record magic"
    (crc,) = _CRC.unpack_from(buf, offset + 4)
    length, kind = _LENGTH_KIND.unpack_from(buf, offset + 8)
    end = offset + HEADER_SIZE + length
    if length > MAX_PAYLOAD or end > size:
        return f"record length {length} runs past the end of the file"
    if kind not in KINDS:
        return f"unknown record kind {kind}"
    covered = buf[offset + 8:end]
    if crc32c.crc32c(covered) != crc:
        return "checksum mismatch"
    return _decode(kind, covered[5:], end)


def _decode(kind: int, payload: bytes, end: int) -> JournalRecord | str:
    if kind == COMMIT:
        if len(payload) != _COMMIT.size:
            return "commit record of a wrong size"
        return JournalRecord(COMMIT, -1, -1, b"", end, commit=GroupCommit(*_COMMIT.unpack(payload)))
    if kind == FILE_HEADER:  # the version travels in entry_id
        if len(payload) != _VERSION.size:
            return "file header record of a wrong size"
        return JournalRecord(FILE_HEADER, -1, _VERSION.unpack(payload)[0], b"", end)
    if kind == ADD_REF:
        if len(payload) != _REF.size:
            return "add reference record of a wrong size"
        ledger_id, entry_id, lac, log_id, offset, length = _REF.unpack(payload)
        return JournalRecord(ADD_REF, ledger_id, entry_id, b"", end, EntryReference(lac, log_id, offset, length))
    if kind == ADD:
        if len(payload) < _ENTRY_IDS.size:
            return "add record too short"
        ledger_id, entry_id = _ENTRY_IDS.unpack_from(payload)
        return JournalRecord(ADD, ledger_id, entry_id, payload[_ENTRY_IDS.size:], end)
    if len(payload) < _LEDGER_ID.size:
        return "ledger record too short"
    (ledger_id,) = _LEDGER_ID.unpack_from(payload)
    return JournalRecord(kind, ledger_id, -1, payload[_LEDGER_ID.size:], end)


def find_next_record(buf: Buffer, start: int, size: int, kind: int | None = None) -> int | None:
    """The offset of the first valid record (of ``kind``, if given) at or after ``start``, or None."""
    position = start
    while True:
        position = buf.find(MAGIC, position, size)
        if position < 0:
            return None
        record = parse_record(buf, position, size)
        if isinstance(record, JournalRecord) and (kind is None or record.kind == kind):
            return position
        position += 1
