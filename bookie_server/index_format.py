"""The on-disk format of a ledger's index file (version 2), and reading the old version 1 files.

Version 2 (``<ledger id>.idx``)::

    file header (32 bytes): b"PLIX" | version u32 = 2 | ledger id u64 | 12 zero bytes | crc32c u32
    then page records, back to back, record k at byte 32 + k * RECORD_BYTES:
      page header (32 bytes): b"PLPG" | page number u64 | ledger id u64 | 8 zero bytes | crc32c u32
      1024 slots of 32 bytes, slot i for entry id page*1024 + i:
        log id u32 | offset u64 | length u32 | entry id u64 | SLOT_MARK u32 | crc32c u32

The file grows by one record per page actually used, whatever the entry ids:
a record carries its page number, and a directory (page -> record position) is
built when the file is first opened. Records are rewritten in place.

Every slot carries its own checksum (seeded with the ledger id, covering the
entry id and a non-zero mark), so a zeroed, bit-flipped or misplaced slot is
told apart from an empty one ("log id 0" with a valid checksum). Slots are
32 bytes at 32-byte aligned offsets: a write torn at any sector boundary
leaves every slot either wholly old or wholly new. A slot torn mid-way (at
a byte boundary) fails its own checksum only; its neighbours keep theirs.

Version 1 (``PLIX`` | version 1 | 8 zero bytes, then 16-byte slots of entry
e at byte 16 + 16*e, no checksums) is read page by page (``read_v1_pages``)
to convert it.

Pure functions (and a small cache of empty-page templates, see ``encode_record``).
"""
from __future__ import annotations

import functools
import os
import struct
from typing import Iterator

import crc32c

MAGIC = b"PLIX"
VERSION = 2
PAGE_SHIFT = 10
PAGE_SLOTS = 1 << PAGE_SHIFT
SLOT_MASK = PAGE_SLOTS - 1
MEMORY_SLOT = struct.Struct(">IQI")  # a slot in a cached page: log id, offset, length (16 bytes)
SLOT_SIZE = MEMORY_SLOT.size
PAGE_BYTES = PAGE_SLOTS * SLOT_SIZE  # a cached page
MAX_PAGE_NO = ((1 << 63) - 1) >> PAGE_SHIFT

_FILE_HEAD = struct.Struct(">4sIQ12x")
HEADER_BYTES = _FILE_HEAD.size + 4
_PAGE_HEAD = struct.Struct(">4sQQ8x")
_PAGE_MAGIC = b"PLPG"
PAGE_HEAD_BYTES = _PAGE_HEAD.size + 4
_DISK_TAIL = struct.Struct(">QI")  # entry id, mark (after the 16 location bytes)
SLOT_MARK = 0x5EC7A11D
DISK_SLOT_BYTES = SLOT_SIZE + _DISK_TAIL.size + 4
RECORD_BYTES = PAGE_HEAD_BYTES + PAGE_SLOTS * DISK_SLOT_BYTES
_CRC = struct.Struct(">I")
_EMPTY_LOCATION = bytes(SLOT_SIZE)

V1_HEADER = MAGIC + (1).to_bytes(4, "big") + bytes(8)
_V1_PAGE_BYTES = PAGE_BYTES


def _seed(ledger_id: int) -> int:
    return crc32c.crc32c(ledger_id.to_bytes(8, "big"))


def record_offset(position: int) -> int:
    return HEADER_BYTES + position * RECORD_BYTES


def encode_file_header(ledger_id: int) -> bytes:
    head = _FILE_HEAD.pack(MAGIC, VERSION, ledger_id)
    return head + _CRC.pack(crc32c.crc32c(head))


def file_version(data: bytes, ledger_id: int) -> int | None:
    """1 or 2 if ``data`` (the file's first HEADER_BYTES, or fewer) is a good header of this ledger's file,
    else None (damaged, or another ledger's)."""
    if data[:len(V1_HEADER)] == V1_HEADER:
        return 1
    if len(data) < HEADER_BYTES or _CRC.unpack_from(data, _FILE_HEAD.size)[0] != crc32c.crc32c(
            data[:_FILE_HEAD.size]):
        return None
    magic, version, owner = _FILE_HEAD.unpack_from(data)
    return VERSION if magic == MAGIC and version == VERSION and owner == ledger_id else None


def encode_page_head(ledger_id: int, page_no: int) -> bytes:
    head = _PAGE_HEAD.pack(_PAGE_MAGIC, page_no, ledger_id)
    return head + _CRC.pack(crc32c.crc32c(head))


def decode_page_head(data: bytes, ledger_id: int) -> int | None:
    """The page number a record header names, or None if it is damaged (or another ledger's)."""
    if len(data) < PAGE_HEAD_BYTES or _CRC.unpack_from(data, _PAGE_HEAD.size)[0] != crc32c.crc32c(
            data[:_PAGE_HEAD.size]):
        return None
    magic, page_no, owner = _PAGE_HEAD.unpack_from(data)
    if magic != _PAGE_MAGIC or owner != ledger_id or page_no > MAX_PAGE_NO:
        return None
    return page_no


def encode_record(ledger_id: int, page_no: int, page: bytes, damaged: dict[int, bytes] | None = None) -> bytes:
    """A page record: header and every slot with its checksum. A slot in ``damaged`` (slot -> the raw bytes
    read) that the cached page still leaves empty is written back as read: damage stays damage.

    A page with few entries (a new ledger's first page holds one) is not checksummed slot by slot: its empty
    slots come from ``_empty_slots`` (the page's empty slots under seed 0, computed once per page number)
    turned into this ledger's by one XOR, since CRC-32C is affine: for bodies of one length,
    ``crc(body, seed) = crc(body, 0) ^ crc(zeros, seed) ^ crc(zeros, 0)``. Then only its entries are
    checksummed (docs/measurements.md, "Index checksums")."""
    view = memoryview(page)
    if len(view) != PAGE_BYTES:
        raise ValueError(f"a cached index page is {PAGE_BYTES} bytes, not {len(view)}")
    seed, base, pack_tail, crc = _seed(ledger_id), page_no << PAGE_SHIFT, _DISK_TAIL.pack, crc32c.crc32c
    data = bytes(view)
    used = []  # the non-empty slots, found a block at a time (a comparison with zeros is a memcmp)
    for block in range(0, PAGE_BYTES, _BLOCK_BYTES):
        if data[block:block + _BLOCK_BYTES] != _ZERO_BLOCK:
            used.extend(start // SLOT_SIZE for start in range(block, block + _BLOCK_BYTES, SLOT_SIZE)
                        if data[start:start + SLOT_SIZE] != _EMPTY_LOCATION)
            if len(used) > _SPARSE_SLOTS:
                return _encode_dense(ledger_id, page_no, view, damaged)
    delta = crc(_ZERO_BODY, seed) ^ _ZERO_BODY_CRC0
    mask = int.from_bytes(_CRC.pack(delta), "little") * _CRC_FIELDS
    slots = bytearray((_empty_slots(page_no) ^ mask).to_bytes(PAGE_SLOTS * DISK_SLOT_BYTES, "little"))
    for slot in used:
        body = data[slot * SLOT_SIZE:(slot + 1) * SLOT_SIZE] + pack_tail(base + slot, SLOT_MARK)
        start = slot * DISK_SLOT_BYTES
        slots[start:start + DISK_SLOT_BYTES] = body + _CRC.pack(crc(body, seed))
    if damaged:
        for slot, raw in damaged.items():
            if 0 <= slot < PAGE_SLOTS and data[slot * SLOT_SIZE:(slot + 1) * SLOT_SIZE] == _EMPTY_LOCATION:
                start = slot * DISK_SLOT_BYTES
                slots[start:start + DISK_SLOT_BYTES] = raw
    return encode_page_head(ledger_id, page_no) + bytes(slots)


def _encode_dense(ledger_id: int, page_no: int, view: memoryview, damaged: dict[int, bytes] | None) -> bytes:
    """``encode_record`` of a page with many entries: every slot checksummed in turn."""
    seed, base, pack_tail, crc = _seed(ledger_id), page_no << PAGE_SHIFT, _DISK_TAIL.pack, crc32c.crc32c
    parts = [encode_page_head(ledger_id, page_no)]
    append = parts.append
    for slot in range(PAGE_SLOTS):
        location = view[slot * SLOT_SIZE:(slot + 1) * SLOT_SIZE]
        if damaged and slot in damaged and location == _EMPTY_LOCATION:
            append(damaged[slot])
            continue
        body = b"".join((location, pack_tail(base + slot, SLOT_MARK)))
        append(body)
        append(_CRC.pack(crc(body, seed)))
    return b"".join(parts)


#: a page with more entries than this is encoded slot by slot (``_encode_dense``)
_SPARSE_SLOTS = 256
_BLOCK_BYTES = 16 * SLOT_SIZE
_ZERO_BLOCK = bytes(_BLOCK_BYTES)
_ZERO_BODY = bytes(DISK_SLOT_BYTES - 4)
_ZERO_BODY_CRC0 = crc32c.crc32c(_ZERO_BODY)
#: 1 at the lowest byte of every slot's checksum, in a record's slots read as a little-endian integer
_CRC_FIELDS = sum(1 << (8 * (slot * DISK_SLOT_BYTES + DISK_SLOT_BYTES - 4)) for slot in range(PAGE_SLOTS))


@functools.lru_cache(maxsize=16)
def _empty_slots(page_no: int) -> int:
    """Every slot of page ``page_no`` empty and checksummed with seed 0: a record's slots (without its header)
    as a little-endian integer."""
    base, pack_tail, crc = page_no << PAGE_SHIFT, _DISK_TAIL.pack, crc32c.crc32c
    parts = []
    for slot in range(PAGE_SLOTS):
        body = _EMPTY_LOCATION + pack_tail(base + slot, SLOT_MARK)
        parts.append(body)
        parts.append(_CRC.pack(crc(body)))
    return int.from_bytes(b"".join(parts), "little")


def decode_slots(ledger_id: int, page_no: int, data: bytes) -> tuple[bytearray, dict[int, bytes]]:
    """The cached form of a record's slots (``data`` without the page header, possibly cut short), and the
    damaged ones (slot -> raw bytes; missing bytes count as damage). A damaged slot reads as empty in the
    cached page: ``damaged`` is what tells it from absence."""
    seed, base, crc = _seed(ledger_id), page_no << PAGE_SHIFT, crc32c.crc32c
    page = bytearray(PAGE_BYTES)
    damaged: dict[int, bytes] = {}
    body_size = DISK_SLOT_BYTES - 4
    for slot in range(PAGE_SLOTS):
        start = slot * DISK_SLOT_BYTES
        raw = data[start:start + DISK_SLOT_BYTES]
        if len(raw) == DISK_SLOT_BYTES and _CRC.unpack_from(raw, body_size)[0] == crc(raw[:body_size], seed) \
                and _DISK_TAIL.unpack_from(raw, SLOT_SIZE) == (base + slot, SLOT_MARK):
            page[slot * SLOT_SIZE:(slot + 1) * SLOT_SIZE] = raw[:SLOT_SIZE]
        else:
            damaged[slot] = bytes(raw).ljust(DISK_SLOT_BYTES, b"\0")
    return page, damaged


def read_v1_pages(fd: int, size: int) -> Iterator[tuple[int, bytes]]:
    """The non-empty pages of a version 1 file, (page number, 16 KiB cached page), skipping holes."""
    offset = len(V1_HEADER)
    while offset < size:
        try:
            offset = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            return
        page_no = (offset - len(V1_HEADER)) // _V1_PAGE_BYTES
        start = len(V1_HEADER) + page_no * _V1_PAGE_BYTES
        data = os.pread(fd, _V1_PAGE_BYTES, start)
        if data.strip(b"\0"):
            yield page_no, data.ljust(_V1_PAGE_BYTES, b"\0")
        offset = start + _V1_PAGE_BYTES
