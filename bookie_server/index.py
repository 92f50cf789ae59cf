"""The ledger index: (ledger id, entry id) -> entry-log location, in cached pages flushed lazily.

Each ledger has an index file ``<dir>/<ll>/<hh>/<ledger id>.idx`` (``ll`` and
``hh`` are the low and next byte of the id, in hex, so no directory holds
more than 256 entries per level). The file is a 16-byte header then fixed
16-byte slots, one per entry id (log id u32, offset u64, length u32; log id 0
means "no entry"), grouped in pages of 1024 slots. Pages are cached in
memory; updates only touch the cache. A checkpoint copies the dirty pages
(``dirty_pages``), writes and fsyncs them (``write_pages``, no lock needed),
then ``mark_clean``. Only clean pages are evicted; when dirty pages fill the
cache, ``over_capacity`` asks the owner for an early checkpoint.

Garbage collection: ``discard`` drops a deleted ledger's cached pages at
once and from then on ignores its index file (a zombie writer re-creating
the ledger starts from empty pages, and the first write of those replaces
the file); the file itself is unlinked by the checkpoint that made the
deletion durable (``ready_discards`` / ``remove_files``, see
``storage_gc``). ``remove_orphan_files`` deletes, at start, the files of
ledgers the bookie no longer has.

Not thread-safe except ``write_pages`` and ``remove_files``: the owner serialises the other calls.
"""
from __future__ import annotations

import os
import struct
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from bookie_server.entry_log import EntryLocation
from bookie_server.files import fsync_dir, make_dirs
from pyspark_ledger.errors import CorruptStorageError, StorageError

FILE_HEADER = b"PLIX" + (1).to_bytes(4, "big") + bytes(8)
_SLOT = struct.Struct(">IQI")
SLOT_SIZE = _SLOT.size
PAGE_SHIFT = 10
PAGE_SLOTS = 1 << PAGE_SHIFT
PAGE_BYTES = PAGE_SLOTS * SLOT_SIZE
_SLOT_MASK = PAGE_SLOTS - 1


INDEX_SUFFIX = ".idx"


class PageCopy(NamedTuple):
    ledger_id: int
    page_no: int
    generation: int
    data: bytes
    discarded: int | None = None  # the ledger's pending discard when copied: the write replaces its file


class LedgerIndex:
    """Index pages of every ledger, cached up to ``cache_bytes``."""

    def __init__(self, directory: Path, cache_bytes: int) -> None:
        self._dir = directory
        self._max_pages = max(1, cache_bytes // PAGE_BYTES)
        self._pages: dict[tuple[int, int], bytearray] = {}
        self._dirty: dict[tuple[int, int], int] = {}  # page -> generation (bumped per update)
        self._discarded: dict[int, int] = {}  # ledger -> deletion sequence; its file on disk is stale

    def index_path(self, ledger_id: int) -> Path:
        low, next_byte = f"{ledger_id & 0xFF:02x}", f"{(ledger_id >> 8) & 0xFF:02x}"
        return self._dir / low / next_byte / f"{ledger_id:016x}{INDEX_SUFFIX}"

    @property
    def over_capacity(self) -> bool:
        """True when dirty pages alone fill the cache: a checkpoint should flush them."""
        return len(self._dirty) >= self._max_pages

    @property
    def cached_pages(self) -> int:
        return len(self._pages)

    def put(self, ledger_id: int, entry_id: int, location: EntryLocation) -> None:
        key = (ledger_id, entry_id >> PAGE_SHIFT)
        page = self._pages.get(key)
        if page is None:
            page = self._load(key, create=True)
        _SLOT.pack_into(page, (entry_id & _SLOT_MASK) * SLOT_SIZE, *location)
        self._dirty[key] = self._dirty.get(key, 0) + 1

    def get(self, ledger_id: int, entry_id: int) -> EntryLocation | None:
        """The entry's location, or None if this bookie has no such entry."""
        key = (ledger_id, entry_id >> PAGE_SHIFT)
        page = self._pages.get(key)
        if page is None:
            page = self._load(key, create=False)
            if page is None:
                return None
        log_id, offset, length = _SLOT.unpack_from(page, (entry_id & _SLOT_MASK) * SLOT_SIZE)
        return EntryLocation(log_id, offset, length) if log_id else None

    def dirty_pages(self) -> list[PageCopy]:
        """Copies of every dirty page, to write outside the owner's lock."""
        return [PageCopy(key[0], key[1], generation, bytes(self._pages[key]), self._discarded.get(key[0]))
                for key, generation in self._dirty.items()]

    def write_pages(self, copies: list[PageCopy]) -> None:
        """Write and fsync page copies to the index files (raises OSError)."""
        by_ledger: dict[int, list[PageCopy]] = defaultdict(list)
        for copy in copies:
            by_ledger[copy.ledger_id].append(copy)
        new_parents: set[Path] = set()
        for ledger_id, pages in by_ledger.items():
            fd = self._open_for_write(ledger_id, new_parents, fresh=pages[0].discarded is not None)
            try:
                for copy in pages:
                    _pwrite_all(fd, copy.data, len(FILE_HEADER) + copy.page_no * PAGE_BYTES)
                os.fsync(fd)
            finally:
                os.close(fd)
        for parent in new_parents:
            fsync_dir(parent)

    def mark_clean(self, copies: list[PageCopy]) -> None:
        """After ``write_pages``: pages not changed since their copy are clean (evictable)."""
        for copy in copies:
            key = (copy.ledger_id, copy.page_no)
            if self._dirty.get(key) == copy.generation:
                del self._dirty[key]
            if copy.discarded is not None and self._discarded.get(copy.ledger_id) == copy.discarded:
                del self._discarded[copy.ledger_id]  # the stale file was replaced by the new pages
        self._evict()

    # --- garbage collection --------------------------------------------------------------

    def discard(self, ledger_ids: Iterable[int], sequence: int) -> None:
        """Forget deleted ledgers' pages; their files are stale until ``remove_files`` (or a fresh write)."""
        ledger_ids = set(ledger_ids)
        for key in [key for key in self._pages if key[0] in ledger_ids]:
            del self._pages[key]
            self._dirty.pop(key, None)
        self._discarded.update(dict.fromkeys(ledger_ids, sequence))

    @property
    def discarded(self) -> dict[int, int]:
        """Deleted ledgers whose index file is not removed yet, with their deletion sequence."""
        return self._discarded

    def ready_discards(self, durable: int, alive: Callable[[int], bool]) -> list[int]:
        """Discarded ledgers whose file may go now: deleted at sequence <= ``durable``, not created again."""
        return [ledger_id for ledger_id, sequence in self._discarded.items()
                if sequence <= durable and not alive(ledger_id)]

    def remove_files(self, ledger_ids: Iterable[int]) -> None:
        """Unlink the index files of ``ready_discards`` ledgers (raises OSError); then call ``forget_discards``."""
        parents = set()
        for ledger_id in ledger_ids:
            path = self.index_path(ledger_id)
            path.unlink(missing_ok=True)
            parents.add(path.parent)
        for parent in parents:
            if parent.is_dir():
                fsync_dir(parent)

    def forget_discards(self, ledger_ids: Iterable[int]) -> None:
        for ledger_id in ledger_ids:
            self._discarded.pop(ledger_id, None)

    def remove_orphan_files(self, alive: Callable[[int], bool]) -> int:
        """At start: delete the index files (and temp files) of ledgers that are not ``alive``; return how many."""
        parents, removed = set(), 0
        for path in self._dir.glob(f"*/*/*{INDEX_SUFFIX}*"):
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

    def _load(self, key: tuple[int, int], create: bool) -> bytearray | None:
        path = self.index_path(key[0])
        try:
            if key[0] in self._discarded:
                raise FileNotFoundError(path)  # stale: the pages of a deleted ledger
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            if not create:
                return None
            page = bytearray(PAGE_BYTES)
        except OSError as exc:
            raise StorageError(f"cannot open index file {path}: {exc}") from exc
        else:
            page = _read_page(fd, path, key[1])
        self._evict(reserve=1)  # before inserting, so the page being returned stays cached
        self._pages[key] = page
        return page

    def _evict(self, reserve: int = 0) -> None:
        excess = len(self._pages) + reserve - self._max_pages
        if excess <= 0 or len(self._pages) == len(self._dirty):
            return
        victims = [key for key in self._pages if key not in self._dirty][:excess]
        for key in victims:
            del self._pages[key]

    def _open_for_write(self, ledger_id: int, new_parents: set[Path], fresh: bool = False) -> int:
        path = self.index_path(ledger_id)
        if not fresh:
            try:
                return os.open(path, os.O_WRONLY)
            except FileNotFoundError:
                pass
        make_dirs(path.parent)
        temp = path.with_name(path.name + ".tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _pwrite_all(fd, FILE_HEADER, 0)
            os.replace(temp, path)  # the file appears with its header complete
        except BaseException:
            os.close(fd)
            raise
        new_parents.add(path.parent)
        return fd


def _read_page(fd: int, path: Path, page_no: int) -> bytearray:
    try:
        header = os.pread(fd, len(FILE_HEADER), 0)
        data = os.pread(fd, PAGE_BYTES, len(FILE_HEADER) + page_no * PAGE_BYTES)
    except OSError as exc:
        raise StorageError(f"cannot read index file {path}: {exc}") from exc
    finally:
        os.close(fd)
    if header != FILE_HEADER:
        raise CorruptStorageError(f"index file {path} has a bad header; the ledger's index is damaged")
    page = bytearray(data)
    page.extend(bytes(PAGE_BYTES - len(page)))  # pages past the end of the file are empty
    return page


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        if written <= 0:
            raise OSError(f"pwrite made no progress on fd {fd}")
        view, offset = view[written:], offset + written
