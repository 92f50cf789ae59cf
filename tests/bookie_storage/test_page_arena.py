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
