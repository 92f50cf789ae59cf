"""The ledger index: (ledger id, entry id) -> entry-log location, in cached pages flushed lazily.

Each ledger has an index file ``<dir>/<ll>/<hh>/<ledger id>.idx`` (``ll`` and
``hh`` are the low and next byte of the id, in hex, so no directory holds
more than 256 entries per level). Its format is in ``index_format``: page
records of 1024 checksummed slots, each record naming its page, so the file
holds only the pages used (one entry at id 2**63-1 costs one record, not a
sparse file of exabytes). When a ledger's file is first opened its record
headers are read into a directory (``LedgerFile``: page -> record position);
a new page is appended at the next position, a known page is rewritten in
place. Pages are cached in memory (16-byte slots, no checksums; a new page
comes from ``page_arena``, so it costs memory only where it is written: 4 KiB
for a new ledger's first entries, not 16); updates only touch the cache. A
checkpoint lists the dirty pages (``dirty_keys``), then, a chunk at a time,
copies them (``copy_pages``), writes and fsyncs them (``write_pages``, no
lock needed; many ledgers' files at once, see ``index_writes``), then
``mark_clean``. Only
clean pages are evicted; when dirty pages fill the cache, ``over_capacity``
asks the owner for an early checkpoint. The add path (``put``) is what it was:
one 16-byte pack into a cached page; slot checksums are computed when a page
is written (on the checkpoint thread; for a page with few
entries only theirs, the empty slots' come from a per-page-number template,
see ``index_format.encode_record``) and checked when it is loaded. The directories of opened files stay in memory (tens of bytes per
page record, i.e. per 1024 entries).

Damage is never absence. Every slot, record header and the file header carry
a checksum; a damaged slot reads as ``CorruptStorageError``, never as "no
entry". Truncation (records cut off the end, or the whole file gone) cannot
be seen inside the file, so the checkpoint records outside it how many
records each file durably holds (``durable_pages``, kept in the ledger-state
snapshot). A page the directory cannot place while the file is shorter than
that count, or has a damaged record header inside it, or has a damaged file
header, is unknown: reading it raises ``CorruptStorageError`` and writing a
new page to that ledger fails.

Crash orderings (a checkpoint: entry logs fsync'd; pages written in place or
appended, fsync'd; then the snapshot with the new counts is atomically
replaced; then the journal mark moves):

* torn in-place rewrite of a record (kill -9 or power loss mid-write): the
  header bytes are rewritten unchanged; a slot the write did not change
  keeps its bytes and its checksum; a slot it changed is old, new, or (a
  byte-level tear) damaged. Every changed slot was changed by a journal
  record after the persisted mark (the previous checkpoint wrote everything
  before it), so replay puts it again, overwriting the damage in the cache
  before anyone can read it (the storage answers reads only after replay).
  The one un-journaled change, compaction moving an entry, is a 32-byte
  slot at a 32-byte aligned offset: sector-granular tears leave it wholly
  old (still valid: the old log is deleted only after the mark passed) or
  wholly new.
* torn append of new records: they lie at or past the snapshot's count.
  A record there with a damaged header, or cut short, is ignored (its page
  was created after the mark, so replay rebuilds it); a damaged slot in a
  record there reads as empty, for the same reason. New records go after
  the file's end, so an ignored one is never confused with a new one.
* crash after the pages' fsync, before the snapshot: the old snapshot has
  the old (smaller) counts, the records past them are read as above.
* crash after the snapshot, before the mark: the counts cover records that
  are all durable; replay re-applies records whose slots are already there.
* a ledger whose pages could not be written (``write_pages`` reports it)
  keeps its dirty pages and its old durable count; the checkpointer keeps
  the journal mark from moving past the records it had not made durable.

Files of version 1 (no checksums, slot of entry e at 16 + 16*e) are read once
when first opened, their non-empty pages cached as dirty pages of a fresh
file, which the next checkpoint writes as a version 2 file (temp file,
renamed over the old one, so a crash leaves one of the two whole; until
then its pages stay cached, dirty). Their count is unknown until then (``None``): truncation of such a file cannot be
told from absence, as before.

One ledger's index failure stays that ledger's: ``fail`` records it (the
owner refuses its adds), ``failures`` counts them for the metrics. A ledger
failed by damage stays failed until a restart; one failed because its pages
could not be written takes adds again once a later checkpoint wrote (and
fsync'd) all its dirty pages. A full or read-only disk (ENOSPC, EDQUOT,
EROFS) is not one ledger's failure: ``write_pages`` raises and the
checkpoint fails as a whole.

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

import logging
from pathlib import Path
from typing import Callable, Iterable

from bookie_server.entry_log import EntryLocation
from bookie_server.index_format import MEMORY_SLOT, PAGE_BYTES, PAGE_SHIFT, PAGE_SLOTS, SLOT_MASK, SLOT_SIZE
from bookie_server.index_file import (INDEX_SUFFIX, TORN_WRITE_ENV, LedgerFile, PageCopy, PageKey, index_path,
                                     open_ledger_file, read_record, remove_index_files, remove_orphan_index_files,
                                     write_ledger_file)
from bookie_server.index_writes import write_ledgers
from bookie_server.page_arena import PageArena
from pyspark_ledger.errors import CorruptStorageError

__all__ = ["INDEX_SUFFIX", "PAGE_BYTES", "PAGE_SLOTS", "TORN_WRITE_ENV", "LedgerIndex", "PageCopy", "PageKey"]

log = logging.getLogger(__name__)
_SLOT = MEMORY_SLOT
_WRITE_FAILURE = "cannot write its index file"


class LedgerIndex:
    """Index pages of every ledger, cached up to ``cache_bytes``.

    ``durable_pages`` (ledger -> record count, None if unknown) is what the last checkpoint's snapshot says
    each file holds; ledgers missing from it have no records yet."""

    def __init__(self, directory: Path, cache_bytes: int, durable_pages: dict[int, int | None] | None = None) -> None:
        self._dir = directory
        self._max_pages = max(1, cache_bytes // PAGE_BYTES)
        self._arena = PageArena(PAGE_BYTES)  # new pages: resident only where written
        self._pages: dict[tuple[int, int], bytearray | memoryview] = {}
        self._dirty: dict[tuple[int, int], int] = {}  # page -> generation (bumped per update)
        self._damaged: dict[tuple[int, int], dict[int, bytes]] = {}  # cached page -> its damaged slots
        self._discarded: dict[int, int] = {}  # ledger -> deletion sequence; its file on disk is stale
        self._files: dict[int, LedgerFile] = {}
        self._durable: dict[int, int | None] = dict(durable_pages or {})
        self._failed: dict[int, str] = {}
        self._write_failed: set[int] = set()  # failed ledgers whose pages could not be written (retried)
        self.failures = 0  # ledgers failed (index damage or write errors), for the metrics
        self.damaged_reads = 0  # reads that found damage, for the metrics

    def index_path(self, ledger_id: int) -> Path:
        return index_path(self._dir, ledger_id)

    @property
    def over_capacity(self) -> bool:
        """True when dirty pages alone fill the cache: a checkpoint should flush them."""
        return len(self._dirty) >= self._max_pages

    @property
    def cached_pages(self) -> int:
        return len(self._pages)

    def durable_pages(self, ledger_id: int) -> int | None:
        """How many records the ledger's file durably holds (None: unknown, a version 1 file)."""
        return self._durable.get(ledger_id, 0)

    # --- failures ---------------------------------------------------------------------

    @property
    def failed(self) -> dict[int, str]:
        """Ledgers whose index failed (ledger -> why): their adds are refused (see the module docstring)."""
        return self._failed

    def fail(self, ledger_id: int, reason: str) -> None:
        if ledger_id not in self._failed:
            self._failed[ledger_id] = reason
            self.failures += 1
            log.error("index of ledger %d failed: %s; its adds answer IO_ERROR (other ledgers are not affected)",
                      ledger_id, reason)

    # --- entries ----------------------------------------------------------------------

    def put(self, ledger_id: int, entry_id: int, location: EntryLocation) -> None:
        """Raises CorruptStorageError/StorageError if the ledger's page cannot be loaded (the page is unchanged)."""
        key = (ledger_id, entry_id >> PAGE_SHIFT)
        page = self._pages.get(key)
        if page is None:
            page = self._load(key, create=True)
        _SLOT.pack_into(page, (entry_id & SLOT_MASK) * SLOT_SIZE, *location)
        self._dirty[key] = self._dirty.get(key, 0) + 1

    def get(self, ledger_id: int, entry_id: int) -> EntryLocation | None:
        """The entry's location, or None if this bookie has no such entry; CorruptStorageError if its slot
        (or the page or file holding it) is damaged, StorageError if it cannot be read."""
        key = (ledger_id, entry_id >> PAGE_SHIFT)
        page = self._pages.get(key)
        if page is None:
            page = self._load(key, create=False)
            if page is None:
                return None
        slot = entry_id & SLOT_MASK
        log_id, offset, length = _SLOT.unpack_from(page, slot * SLOT_SIZE)
        if log_id:
            return EntryLocation(log_id, offset, length)
        damaged = self._damaged.get(key)
        if damaged and slot in damaged:
            self.damaged_reads += 1
            raise CorruptStorageError(f"index slot of ledger {ledger_id} entry {entry_id} in "
                                      f"{self.index_path(ledger_id)} is damaged (checksum mismatch)")
        return None

    # --- checkpoints ------------------------------------------------------------------

    def dirty_pages(self) -> list[PageCopy]:
        """Copies of every dirty page, to write outside the owner's lock."""
        return self.copy_pages(self.dirty_keys())

    def dirty_keys(self) -> list[PageKey]:
        """Every dirty page now, in the order a checkpoint writes them: by ledger, then by record position (so a
        ledger whose pages are written in several chunks extends its file from the front, and a fresh file is
        created by its first chunk)."""
        files = self._files
        keys = [PageKey(ledger_id, page_no, files[ledger_id].epoch) for ledger_id, page_no in self._dirty]
        keys.sort(key=lambda key: (key.ledger_id, files[key.ledger_id].positions[key.page_no]))
        return keys

    def copy_pages(self, keys: Iterable[PageKey]) -> list[PageCopy]:
        """Copies of the pages among ``keys`` (from ``dirty_keys``) that are still dirty pages of the same
        file (not discarded since), to write outside the owner's lock."""
        copies = []
        for ledger_id, page_no, epoch in keys:
            key = (ledger_id, page_no)
            generation = self._dirty.get(key)
            ledger_file = self._files.get(ledger_id)
            if generation is None or ledger_file is None or ledger_file.epoch != epoch:
                continue
            copies.append(PageCopy(ledger_id, page_no, generation, bytes(self._pages[key]),
                                   self._discarded.get(ledger_id), ledger_file.positions[page_no],
                                   epoch, ledger_file.fresh, self._damaged.get(key)))
        return copies

    def write_pages(self, copies: list[PageCopy]) -> dict[int, Exception]:
        """Write and fsync page copies to the index files; return the ledgers that failed (ledger -> error).

        One ledger's failure does not stop the others'; a full or read-only disk raises (``index_writes``)."""
        return write_ledgers(copies, self._write_ledger)

    def mark_clean(self, copies: list[PageCopy], failed: dict[int, Exception] | None = None) -> set[int]:
        """After ``write_pages``: pages not changed since their copy are clean (evictable); the ledgers that
        failed become failed (their pages stay dirty). Returns the ledgers whose durable count changed."""
        failed = failed or {}
        for ledger_id, exc in failed.items():
            self.fail(ledger_id, f"{_WRITE_FAILURE} {self.index_path(ledger_id)} {self.index_path(ledger_id)}: {exc}")
            self._write_failed.add(ledger_id)
        changed: set[int] = set()
        for copy in copies:
            ledger_id = copy.ledger_id
            ledger_file = self._files.get(ledger_id)
            if ledger_id in failed or ledger_file is None or ledger_file.epoch != copy.epoch:
                continue  # failed, or the ledger was discarded since the copy: its pages are not these
            key = (ledger_id, copy.page_no)
            if self._dirty.get(key) == copy.generation:
                del self._dirty[key]
            if copy.discarded is not None and self._discarded.get(ledger_id) == copy.discarded:
                del self._discarded[ledger_id]  # the stale file was replaced by the new pages
            if ledger_file.fresh and copy.fresh:
                ledger_file.fresh = False
                self._durable[ledger_id] = 0  # a new file: its count starts again
            durable = self._durable.get(ledger_id, 0)
            if durable is None or copy.position >= durable:
                self._durable[ledger_id] = max(copy.position + 1, durable or 0)
                changed.add(ledger_id)
        written = self._write_failed.difference(failed).intersection(copy.ledger_id for copy in copies)
        if written:  # (a checkpoint may write a ledger's pages in several chunks: the last one counts)
            written.difference_update(key[0] for key in self._dirty)
        for ledger_id in written:
            self._write_failed.discard(ledger_id)  # written at last (every dirty page again, then fsync'd)
            if self._failed.get(ledger_id, "").startswith(_WRITE_FAILURE):
                del self._failed[ledger_id]
                log.warning("index pages of ledger %d were written at last: it takes adds again", ledger_id)
        self._evict()
        return changed

    # --- garbage collection --------------------------------------------------------------

    def discard(self, ledger_ids: Iterable[int], sequence: int) -> None:
        """Forget deleted ledgers' pages; their files are stale until ``remove_files`` (or a fresh write)."""
        ledger_ids = set(ledger_ids)
        for key in [key for key in self._pages if key[0] in ledger_ids]:
            self._drop_page(key)
            self._dirty.pop(key, None)
            self._damaged.pop(key, None)
        for ledger_id in ledger_ids:
            self._files[ledger_id] = LedgerFile(fresh=True)
            self._durable[ledger_id] = 0
            self._failed.pop(ledger_id, None)
            self._write_failed.discard(ledger_id)
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
        remove_index_files(self._dir, ledger_ids)

    def forget_discards(self, ledger_ids: Iterable[int]) -> None:
        for ledger_id in ledger_ids:
            self._discarded.pop(ledger_id, None)
            ledger_file = self._files.get(ledger_id)
            if ledger_file is not None and ledger_file.fresh and not ledger_file.positions:
                del self._files[ledger_id]  # nothing left of it; a new ledger of that id starts from nothing
                self._durable.pop(ledger_id, None)

    def remove_orphan_files(self, alive: Callable[[int], bool]) -> int:
        """At start: delete the index files (and temp files) of ledgers that are not ``alive``; return how many."""
        return remove_orphan_index_files(self._dir, alive)

    # --- loading ------------------------------------------------------------------------

    def _load(self, key: tuple[int, int], create: bool) -> bytearray | memoryview | None:
        ledger_id, page_no = key
        ledger_file = self._files.get(ledger_id)
        if ledger_file is None:
            ledger_file = self._open_file(ledger_id)
            if (ledger_id, page_no) in self._pages:  # a version 1 file was converted: its pages are cached now
                return self._pages[key]
        position = ledger_file.positions.get(page_no)
        damaged: dict[int, bytes] = {}
        if position is not None:
            page, damaged = self._read_record(ledger_id, page_no, position)
        elif ledger_file.unknown is not None:
            self.damaged_reads += 0 if create else 1
            raise CorruptStorageError(f"index file {self.index_path(ledger_id)} of ledger {ledger_id} is damaged "
                                      f"({ledger_file.unknown}): page {page_no} may have been in it")
        elif not create:
            return None
        else:
            page = self._arena.new_page()
            ledger_file.positions[page_no] = ledger_file.next_position
            ledger_file.next_position += 1
        self._evict(reserve=1)  # before inserting, so the page being returned stays cached
        self._pages[key] = page
        if damaged:
            self._damaged[key] = damaged
        return page

    def _read_record(self, ledger_id: int, page_no: int, position: int) -> tuple[bytearray, dict[int, bytes]]:
        page, damaged = read_record(self.index_path(ledger_id), ledger_id, page_no, position)
        durable = self._durable.get(ledger_id, 0)
        if damaged and durable is not None and position >= durable:
            damaged = {}  # written after the last checkpoint's mark: replay rebuilt what was in it (see above)
        return page, damaged

    def _open_file(self, ledger_id: int) -> LedgerFile:
        """Build the ledger's directory from its file (raises StorageError if it cannot be read)."""
        path = self.index_path(ledger_id)
        durable = self._durable.get(ledger_id, 0)
        if ledger_id in self._discarded:
            ledger_file = LedgerFile(fresh=True)  # stale: the pages of a deleted ledger
        else:
            ledger_file, v1_pages = open_ledger_file(path, ledger_id, durable)
            if v1_pages is not None:
                self._cache_v1_pages(ledger_file, path, ledger_id, v1_pages)
        if ledger_file.unknown is not None:
            log.error("index file %s of ledger %d is damaged: %s", path, ledger_id, ledger_file.unknown)
        self._files[ledger_id] = ledger_file
        return ledger_file

    def _cache_v1_pages(self, ledger_file: LedgerFile, path: Path, ledger_id: int,
                        pages: list[tuple[int, bytes]]) -> None:
        """Cache every page of a version 1 file as a dirty page of ``ledger_file``, a fresh version 2 file."""
        for page_no, data in pages:
            key = (ledger_id, page_no)
            ledger_file.positions[page_no] = ledger_file.next_position
            ledger_file.next_position += 1
            self._pages[key] = bytearray(data)
            self._dirty[key] = self._dirty.get(key, 0) + 1
        self._durable[ledger_id] = None
        log.info("index file %s is of version 1: its %d pages are rewritten as version 2 at the next checkpoint",
                 path, len(pages))

    def _evict(self, reserve: int = 0) -> None:
        excess = len(self._pages) + reserve - self._max_pages
        if excess <= 0 or len(self._pages) == len(self._dirty):
            return
        victims = [key for key in self._pages if key not in self._dirty][:excess]
        for key in victims:
            self._drop_page(key)
            self._damaged.pop(key, None)

    def _drop_page(self, key: tuple[int, int]) -> None:
        page = self._pages.pop(key)
        if self._arena.owns(page):
            self._arena.release(page)

    def _write_ledger(self, ledger_id: int, pages: list[PageCopy], new_parents: dict[Path, list[int]]) -> None:
        """Write one ledger's page copies (``index_file.write_ledger_file``; the seam tests inject faults at)."""
        write_ledger_file(self.index_path(ledger_id), ledger_id, pages, new_parents)

