"""One ledger's index file on disk: its directory of page records, reading one record, writing records.

The format is in ``index_format``; what the cache does with pages, and the crash orderings these steps
are part of, are in ``index``. Here: ``scan_file`` builds a ``LedgerFile`` (page -> record position) from
the record headers (or hands back the pages of a version 1 file to convert), ``read_record`` reads and
checks one record, ``write_ledger_file`` writes records in place or, for a new file, through a temp file
renamed over the old one. The files of many ledgers: ``index_path`` places them, ``remove_index_files``
and ``remove_orphan_index_files`` unlink them (fsyncing their directories).
"""
from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from bookie_server.files import fsync_dir, make_dirs
from bookie_server.index_format import (HEADER_BYTES, PAGE_HEAD_BYTES, RECORD_BYTES, decode_page_head, decode_slots,
                                        encode_file_header, encode_record, file_version, read_v1_pages,
                                        record_offset)
from pyspark_ledger.errors import CorruptStorageError, StorageError

TORN_WRITE_ENV = "BOOKIE_INDEX_TORN_WRITE_BYTES"  # test hook: see ``_torn_write``
INDEX_SUFFIX = ".idx"
_epochs = itertools.count(1)


class PageCopy(NamedTuple):
    """A copy of one dirty page, taken for a checkpoint write (``LedgerIndex.copy_pages``)."""
    ledger_id: int
    page_no: int
    generation: int
    data: bytes
    discarded: int | None = None  # the ledger's pending discard when copied
    position: int = 0  # record position in the file
    epoch: int = 0  # the LedgerFile the copy belongs to
    fresh: bool = False  # the write replaces the ledger's file (discarded, or version 1 being converted)
    damaged: dict | None = None  # slot -> raw bytes of damaged slots not overwritten since


class PageKey(NamedTuple):
    """A dirty page to copy later (``copy_pages``), in the file it was dirty in."""
    ledger_id: int
    page_no: int
    epoch: int


class LedgerFile:
    """What this process knows of one ledger's index file: its directory and whether some pages are unknown."""

    __slots__ = ("positions", "next_position", "unknown", "fresh", "epoch")

    def __init__(self, positions: dict[int, int] | None = None, next_position: int = 0, unknown: str | None = None,
                 fresh: bool = False) -> None:
        self.positions = positions if positions is not None else {}  # page -> record position
        self.next_position = next_position
        self.unknown = unknown  # why some pages of the file cannot be located (damage), else None
        self.fresh = fresh  # the file on disk is not (yet) this ledger's version 2 file: the next write replaces it
        self.epoch = next(_epochs)


def index_path(directory: Path, ledger_id: int) -> Path:
    """``<directory>/<ll>/<hh>/<ledger id>.idx``: ``ll`` and ``hh`` are the id's low and next byte, in hex."""
    low, next_byte = f"{ledger_id & 0xFF:02x}", f"{(ledger_id >> 8) & 0xFF:02x}"
    return directory / low / next_byte / f"{ledger_id:016x}{INDEX_SUFFIX}"


def open_ledger_file(path: Path, ledger_id: int,
                     durable: int | None) -> tuple[LedgerFile, list[tuple[int, bytes]] | None]:
    """``scan_file`` of the ledger's file at ``path``; a missing file is empty, or unknown when the last
    checkpoint counted ``durable`` records in it. StorageError if it cannot be opened or read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return LedgerFile(unknown=f"the file is missing but held {durable} pages" if durable else None), None
    except OSError as exc:
        raise StorageError(f"cannot open index file {path}: {exc}") from exc
    try:
        return scan_file(fd, ledger_id, durable)
    except OSError as exc:
        raise StorageError(f"cannot read index file {path}: {exc}") from exc
    finally:
        os.close(fd)


def remove_index_files(directory: Path, ledger_ids: Iterable[int]) -> None:
    """Unlink the ledgers' index files and fsync their directories (raises OSError)."""
    parents = set()
    for ledger_id in ledger_ids:
        path = index_path(directory, ledger_id)
        path.unlink(missing_ok=True)
        parents.add(path.parent)
    for parent in parents:
        if parent.is_dir():
            fsync_dir(parent)


def remove_orphan_index_files(directory: Path, alive: Callable[[int], bool]) -> int:
    """Delete the index files (and temp files) under ``directory`` of ledgers that are not ``alive``; how many."""
    parents, removed = set(), 0
    for path in directory.glob(f"*/*/*{INDEX_SUFFIX}*"):
        name = path.name
        try:
            ledger_id = int(name[:name.index(INDEX_SUFFIX)], 16)
        except ValueError:
            continue
        if name.endswith(".tmp") or not alive(ledger_id):
            path.unlink(missing_ok=True)
            parents.add(path.parent)
            removed += 1
    for parent in parents:
        fsync_dir(parent)
    return removed


def scan_file(fd: int, ledger_id: int, durable: int | None) -> tuple[LedgerFile, list[tuple[int, bytes]] | None]:
    """The directory of an open index file, and for a version 1 file its non-empty pages (page no, slots) to
    convert (then the directory is a fresh, empty one). ``durable``: the records the last checkpoint counted
    (None: unknown). Raises OSError."""
    size = os.fstat(fd).st_size
    version = file_version(os.pread(fd, HEADER_BYTES, 0), ledger_id)
    if version == 1:
        return LedgerFile(fresh=True), list(read_v1_pages(fd, size))
    if version is None:
        return LedgerFile(unknown="its file header is damaged"), None
    records, partial = divmod(size - HEADER_BYTES, RECORD_BYTES) if size >= HEADER_BYTES else (0, 0)
    positions: dict[int, int] = {}
    unknown = None
    if durable is not None and records < durable:
        unknown = f"it holds {records} whole page records, the last checkpoint wrote {durable}: truncated"
    for position in range(records):
        page_no = decode_page_head(os.pread(fd, PAGE_HEAD_BYTES, record_offset(position)), ledger_id)
        if page_no is None or page_no in positions:
            if durable is None or position < durable:
                unknown = f"the header of page record {position} is damaged"
            continue  # past the checkpoint's count: an append torn by a crash, rebuilt by replay
        positions[page_no] = position
    return LedgerFile(positions, max(records + (1 if partial else 0), durable or 0), unknown), None


def read_record(path: Path, ledger_id: int, page_no: int, position: int) -> tuple[bytearray, dict[int, bytes]]:
    """The slots of page ``page_no`` from its record at ``position`` and its damaged slots (slot -> raw bytes);
    CorruptStorageError if the file is missing or the record is not that page's, StorageError if unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.pread(fd, RECORD_BYTES, record_offset(position))
        finally:
            os.close(fd)
    except FileNotFoundError as exc:
        raise CorruptStorageError(f"index file {path} of ledger {ledger_id} is missing") from exc
    except OSError as exc:
        raise StorageError(f"cannot read index file {path}: {exc}") from exc
    if decode_page_head(data, ledger_id) != page_no:
        raise CorruptStorageError(f"index file {path}: the record of page {page_no} at position {position} "
                                  "is damaged")
    return decode_slots(ledger_id, page_no, data[PAGE_HEAD_BYTES:])


def write_ledger_file(path: Path, ledger_id: int, pages: list, new_parents: dict[Path, list[int]]) -> None:
    """Write one ledger's page copies (``PageCopy``) in place, or (a new or fresh file) all of them to a
    temp file renamed over the old one once fsync'd: a crash leaves the old file or the new one whole. A new
    file's directory is added to ``new_parents`` (the caller fsyncs it). Raises OSError."""
    records = [(record_offset(copy.position), encode_record(ledger_id, copy.page_no, copy.data, copy.damaged))
               for copy in sorted(pages, key=lambda copy: copy.position)]
    fd = None
    if not pages[0].fresh:
        try:
            fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            pass
    if fd is not None:
        try:
            torn = os.environ.get(TORN_WRITE_ENV)
            for offset, data in records:
                if torn is not None:
                    _torn_write(fd, data, offset, int(torn))
                _pwrite_all(fd, data, offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        return
    make_dirs(path.parent)
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _pwrite_all(fd, encode_file_header(ledger_id), 0)
        for offset, data in records:
            _pwrite_all(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    new_parents[path.parent].append(ledger_id)


def _torn_write(fd: int, data: bytes, offset: int, length: int) -> None:
    """Test hook (env BOOKIE_INDEX_TORN_WRITE_BYTES): write only the first ``length`` bytes of the first
    record rewritten in place, then exit at once, as a crash in the middle of the write would."""
    os.pwrite(fd, data[:length], offset)
    os._exit(137)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        if written <= 0:
            raise OSError(f"pwrite made no progress on fd {fd}")
        view, offset = view[written:], offset + written
