"""The index cache's page arena: new pages are zeros, a released page is zeros again when reused, a page is
never handed out twice at once."""
from __future__ import annotations

import struct

import pytest

from bookie_server.index import PAGE_BYTES
from bookie_server.page_arena import PageArena


def test_pages_are_zeros_and_released_pages_are_reused_as_zeros():
    arena = PageArena(PAGE_BYTES, pages_per_map=3)
    pages = [arena.new_page() for _ in range(7)]  # three maps
    assert arena.pages == 7
    for number, page in enumerate(pages):
        assert len(page) == PAGE_BYTES and bytes(page) == bytes(PAGE_BYTES)
        struct.pack_into(">QQ", page, PAGE_BYTES - 16, number + 1, number + 1)
    assert [struct.unpack_from(">QQ", page, PAGE_BYTES - 16) for page in pages] == [(n, n) for n in range(1, 8)]
    arena.release(pages[4])
    with pytest.raises(ValueError):
        arena.release(pages[4])
    again = arena.new_page()
    assert again is pages[4] and bytes(again) == bytes(PAGE_BYTES)  # its memory was given back: zeros
    assert [struct.unpack_from(">QQ", page, PAGE_BYTES - 16)[0] for i, page in enumerate(pages) if i != 4] == \
        [1, 2, 3, 4, 6, 7]  # the others kept their bytes
    assert arena.pages == 7 and arena.owns(again) and not arena.owns(bytearray(PAGE_BYTES))


def test_an_arena_page_must_be_a_multiple_of_the_memory_page():
    with pytest.raises(ValueError):
        PageArena(PAGE_BYTES + 1)


def test_a_released_page_is_zeroed_by_hand_if_the_kernel_keeps_its_bytes(monkeypatch):
    import mmap
    monkeypatch.setattr(mmap, "MAP_PRIVATE", mmap.MAP_SHARED)  # MADV_DONTNEED leaves a shared map's bytes
    arena = PageArena(PAGE_BYTES, pages_per_map=2)
    page = arena.new_page()
    page[:] = b"\xff" * PAGE_BYTES
    arena.release(page)
    assert arena.new_page() is page and bytes(page) == bytes(PAGE_BYTES)


def test_a_new_ledger_never_sees_the_slots_of_an_evicted_page(tmp_path):
    from bookie_server.entry_log import EntryLocation
    from bookie_server.index import LedgerIndex

    index = LedgerIndex(tmp_path, cache_bytes=2 * PAGE_BYTES)
    for ledger_id in range(1, 9):
        for entry_id in range(0, 1024, 7):
            index.put(ledger_id, entry_id, EntryLocation(ledger_id, entry_id + 1, 10))
    copies = index.dirty_pages()
    index.mark_clean(copies, index.write_pages(copies))
    assert index.cached_pages <= 2  # the others' memory went back to the arena
    for ledger_id in range(100, 108):
        index.put(ledger_id, 1, EntryLocation(5, 5, 5))
        assert [index.get(ledger_id, e) for e in range(0, 1024, 7)] == [None] * len(range(0, 1024, 7))
    assert [index.get(3, e) for e in range(0, 1024, 7)] == [EntryLocation(3, e + 1, 10) for e in range(0, 1024, 7)]
