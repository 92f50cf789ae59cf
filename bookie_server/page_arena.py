"""Zeroed pages for the index cache whose memory is resident only where they have been written.

A new index page is 16 KiB of zeros, and a new ledger with one entry writes 16 bytes of it: as a bytearray it
costs 16 KiB of RSS at once (CPython zeroes it), so one batch of tiny adds to 10,000 new ledgers cost 160 MiB.
Pages from the arena are slices of private anonymous memory maps (``PAGES_PER_MAP`` pages each): the kernel
maps a memory page (4 KiB) only when it is first written, so such a page costs 4 KiB until more of it is used.
A released page is given back to the kernel (``MADV_DONTNEED``: it reads as zeros again; this is checked, and
the page zeroed by hand if the kernel kept its bytes) and reused by the next ``new_page``. Maps are never
unmapped (their address space is reused); the resident memory of released pages is returned.

The caller must hold no reference to a page after ``release`` (the next ``new_page`` hands it out again).
Not thread-safe: the index's owner serialises the calls.
"""
from __future__ import annotations

import mmap

PAGES_PER_MAP = 1024


class PageArena:
    def __init__(self, page_bytes: int, pages_per_map: int = PAGES_PER_MAP) -> None:
        if page_bytes % mmap.PAGESIZE:
            raise ValueError(f"arena pages of {page_bytes} bytes are not a multiple of the memory page size")
        self._page_bytes = page_bytes
        self._zeros = bytes(page_bytes)
        self._pages_per_map = max(1, pages_per_map)
        self._maps: list[mmap.mmap] = []
        self._free: list[memoryview] = []
        self._free_ids: set[int] = set()
        self._slots: dict[int, tuple[mmap.mmap, int]] = {}  # id(page) -> its map and offset
        self._unused = 0  # pages of the newest map not handed out yet

    @property
    def pages(self) -> int:
        """Pages handed out and not released."""
        return len(self._slots) - len(self._free)

    def new_page(self) -> memoryview:
        """A writable page of zeros."""
        if self._free:
            page = self._free.pop()
            self._free_ids.discard(id(page))
            return page
        if not self._unused:
            # private: MADV_DONTNEED drops its pages (a shared map would keep their bytes)
            self._maps.append(mmap.mmap(-1, self._page_bytes * self._pages_per_map, flags=mmap.MAP_PRIVATE))
            self._unused = self._pages_per_map
        area = self._maps[-1]
        offset = (self._pages_per_map - self._unused) * self._page_bytes
        self._unused -= 1
        page = memoryview(area)[offset:offset + self._page_bytes]
        self._slots[id(page)] = (area, offset)
        return page

    def owns(self, page: object) -> bool:
        return id(page) in self._slots

    def release(self, page: memoryview) -> None:
        """Give the page's memory back (it reads as zeros when handed out again)."""
        if id(page) in self._free_ids:
            raise ValueError("an arena page released twice")
        area, offset = self._slots[id(page)]
        area.madvise(mmap.MADV_DONTNEED, offset, self._page_bytes)
        if page != self._zeros:  # (reading maps the kernel's zero page: it costs no memory)
            page[:] = self._zeros  # the kernel kept the bytes: a page handed out must never hold old slots
        self._free.append(page)
        self._free_ids.add(id(page))
