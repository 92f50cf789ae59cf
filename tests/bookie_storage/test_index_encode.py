"""Encoding index page records: a page with few entries takes the fast path (only its entries checksummed, the
empty slots from a template under seed 0 turned into the ledger's by one XOR); its bytes must be exactly the
slot-by-slot encoding's, whatever the ledger, page number, entries and damaged slots."""
from __future__ import annotations

import random

import pytest

from bookie_server import index_format
from bookie_server.index_format import (MAX_PAGE_NO, PAGE_BYTES, PAGE_HEAD_BYTES, PAGE_SLOTS, SLOT_SIZE,
                                        decode_slots, encode_record)

LEDGERS = [0, 1, 7, 2_003_000_000, 2**63 - 1, 2**64 - 1]
PAGES = [0, 1, 1023, 2**20 + 5, MAX_PAGE_NO]


def page_with(rng: random.Random, slots: int) -> bytearray:
    page = bytearray(PAGE_BYTES)
    for slot in rng.sample(range(PAGE_SLOTS), slots):
        page[slot * SLOT_SIZE:(slot + 1) * SLOT_SIZE] = rng.randbytes(SLOT_SIZE)
    return page


@pytest.mark.parametrize("slots", [0, 1, 2, 17, index_format._SPARSE_SLOTS, index_format._SPARSE_SLOTS + 1,
                                   PAGE_SLOTS])
def test_fast_encoding_is_the_slot_by_slot_encoding(slots):
    rng = random.Random(slots)
    for ledger_id in LEDGERS:
        for page_no in PAGES:
            page = page_with(rng, slots)
            expected = index_format._encode_dense(ledger_id, page_no, memoryview(page), None)
            for form in (page, bytes(page), memoryview(page)):
                assert encode_record(ledger_id, page_no, form) == expected, (ledger_id, page_no)
            decoded, damaged = decode_slots(ledger_id, page_no, expected[PAGE_HEAD_BYTES:])
            assert decoded == page and damaged == {}


def test_a_page_with_one_non_zero_byte_anywhere():
    rng = random.Random(5)
    for offset in [0, 15, 16, PAGE_BYTES // 2 + 3, PAGE_BYTES - 1] + rng.sample(range(PAGE_BYTES), 20):
        page = bytearray(PAGE_BYTES)
        page[offset] = rng.randrange(1, 256)
        expected = index_format._encode_dense(9, 3, memoryview(page), None)
        assert encode_record(9, 3, page) == expected, offset


def test_damaged_slots_stay_damaged_unless_overwritten():
    rng = random.Random(7)
    page = page_with(rng, 3)
    used = [slot for slot in range(PAGE_SLOTS) if any(page[slot * SLOT_SIZE:(slot + 1) * SLOT_SIZE])]
    damaged = {slot: rng.randbytes(32) for slot in used[:1] + [slot for slot in (0, 5, 1023) if slot not in used]}
    record = encode_record(11, 2, page, damaged)
    assert record == index_format._encode_dense(11, 2, memoryview(page), damaged)
    decoded, found = decode_slots(11, 2, record[PAGE_HEAD_BYTES:])
    assert decoded == page
    assert sorted(found) == sorted(set(damaged) - set(used))  # an entry written since overwrote its damage


def test_a_page_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError):
        encode_record(1, 0, bytes(PAGE_BYTES - 1))
