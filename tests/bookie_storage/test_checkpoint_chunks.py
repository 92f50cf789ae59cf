"""A checkpoint writes the dirty index pages a chunk at a time (issue 12: one AddBatch of tiny adds to 10,000
new ledgers must not cost the bookie a copy of every dirty page at once): it never holds more than a chunk's
copies, a ledger split over chunks is whole after a restart, and a ledger failing in a later chunk fails alone
and takes adds again only once all its pages are written."""
from __future__ import annotations

import errno
import tracemalloc

import pytest

from bookie_server import checkpoint
from bookie_server.index import PAGE_BYTES
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import add_op, body

CHUNK_PAGES = 8
FIRST_LEDGER = 1000


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(checkpoint, "CHUNK_BYTES", CHUNK_PAGES * PAGE_BYTES)


def one_entry_each(storage, ledgers: range) -> None:
    adds = [add_op(ledger_id, 0) for ledger_id in ledgers]
    assert storage.add_entries(adds).result(60) == [pb.OK] * len(adds)


def pages_of(storage, ledger_id: int, pages: range, slot: int = 0) -> None:
    """One entry on each of ``pages`` of the ledger (entry 1024 * page + slot)."""
    adds = [add_op(ledger_id, (page << 10) + slot) for page in pages]
    assert storage.add_entries(adds).result(60) == [pb.OK] * len(adds)


def watch_writes(storage, monkeypatch) -> list[list]:
    """Record the page copies of every ``write_pages`` call (ledger, page, position) of the storage's index."""
    index = storage._index
    calls: list[list] = []
    write_pages = index.write_pages

    def recording(copies):
        calls.append([(copy.ledger_id, copy.page_no, copy.position) for copy in copies])
        return write_pages(copies)
    monkeypatch.setattr(index, "write_pages", recording)
    return calls


def checkpoint_peak(storage) -> int:
    """The bytes a checkpoint allocated at its peak (Python allocations of every thread of the process)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        storage.checkpoint()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def pages_of_each(storage, ledgers: range, slot: int) -> None:
    """Dirty the first page of each ledger again (entry ``slot``)."""
    adds = [add_op(ledger_id, slot) for ledger_id in ledgers]
    assert storage.add_entries(adds).result(60) == [pb.OK] * len(adds)


def test_a_checkpoint_holds_one_chunk_of_page_copies_whatever_the_number_of_dirty_pages(open_storage,
                                                                                         monkeypatch):
    ledgers = range(FIRST_LEDGER, FIRST_LEDGER + 32 * CHUNK_PAGES)
    storage = open_storage(index_cache_bytes=2 * CHUNK_PAGES * PAGE_BYTES)
    monkeypatch.setattr(storage._checkpointer, "request", lambda: None)  # this test runs the checkpoint itself
    one_entry_each(storage, ledgers)
    index = storage._index
    assert index.over_capacity and index.cached_pages == len(ledgers)  # dirty: not evictable yet
    calls = watch_writes(storage, monkeypatch)
    peak = checkpoint_peak(storage)
    # all the pages copied at once would be 4 MiB (and 8 MiB more encoded); a chunk is 128 KiB
    bound = len(ledgers) * PAGE_BYTES // 4
    if peak >= bound:  # tracemalloc counts every thread: once more, in case another test's thread allocated
        written = list(calls)
        pages_of_each(storage, ledgers, slot=1)
        peak = min(peak, checkpoint_peak(storage))
        calls[:] = written
    assert peak < bound, f"the checkpoint allocated {peak} bytes at its peak"
    assert sorted(ledger for call in calls for ledger, _, _ in call) == list(ledgers)
    assert max(len(call) for call in calls) <= CHUNK_PAGES
    assert not index.over_capacity and index.cached_pages <= 2 * CHUNK_PAGES  # cleaned pages were evicted
    storage.close()
    storage = open_storage()
    assert [storage.read_entry(ledger_id, 0) for ledger_id in ledgers] == [body(ledger_id, 0) for ledger_id in ledgers]


def test_a_ledger_split_over_chunks_is_whole_after_a_restart(open_storage, data_dir, monkeypatch):
    storage = open_storage()
    big = 7
    pages_of(storage, big, range(3 * CHUNK_PAGES + 3))  # a new file, written by four chunks
    one_entry_each(storage, range(FIRST_LEDGER, FIRST_LEDGER + 5))
    calls = watch_writes(storage, monkeypatch)
    storage.checkpoint()
    positions = [position for call in calls for ledger, _, position in call if ledger == big]
    assert positions == sorted(positions) == list(range(3 * CHUNK_PAGES + 3))  # its file grows from the front
    assert len([call for call in calls if any(ledger == big for ledger, _, _ in call)]) == 4
    pages_of(storage, big, range(0, 5 * CHUNK_PAGES, 2), slot=1)  # rewrites in place and appends, split
    storage.checkpoint()
    storage.close()
    storage = open_storage()
    assert storage._index.durable_pages(big) == 3 * CHUNK_PAGES + 3 + 6  # pages 28, 30, ... 38 appended
    written = sorted([page << 10 for page in range(3 * CHUNK_PAGES + 3)] +
                     [(page << 10) + 1 for page in range(0, 5 * CHUNK_PAGES, 2)])
    assert [storage.read_entry(big, entry_id) for entry_id in written] == [body(big, e) for e in written]
    assert storage.read_entry(FIRST_LEDGER + 4, 0) == body(FIRST_LEDGER + 4, 0)


def test_a_ledger_failing_in_a_later_chunk_fails_alone_until_all_its_pages_are_written(open_storage, monkeypatch):
    storage = open_storage()
    big = 7
    pages_of(storage, big, range(3 * CHUNK_PAGES))
    others = range(FIRST_LEDGER, FIRST_LEDGER + 2 * CHUNK_PAGES)
    one_entry_each(storage, others)
    index = storage._index
    write_ledger = index._write_ledger
    broken = [True]

    def failing(ledger_id, pages, new_parents):  # the disk refuses the ledger's records from position 8 on
        if broken[0] and ledger_id == big and pages[0].position >= CHUNK_PAGES:
            raise OSError(errno.EIO, "injected write error")
        return write_ledger(ledger_id, pages, new_parents)
    monkeypatch.setattr(index, "_write_ledger", failing)
    calls = watch_writes(storage, monkeypatch)
    storage.checkpoint()
    assert storage.failure is None
    assert storage.index_failures() == {"ledgers_failed": 1, "damaged_reads": 0, "pinned": 1}
    big_calls = [call for call in calls if any(ledger == big for ledger, _, _ in call)]
    assert len(big_calls) == 2  # the first chunk wrote, the second failed, the third left the ledger out
    assert index.durable_pages(big) == CHUNK_PAGES
    assert storage.add_entries([add_op(big, 1)]).result(30) == [pb.IO_ERROR]
    assert storage.add_entries([add_op(others[0], 1)]).result(30) == [pb.OK]

    broken[0] = False
    failed_at_write: list[bool] = []
    write_pages = index.write_pages

    def noting(copies):
        if any(copy.ledger_id == big for copy in copies):
            failed_at_write.append(big in index.failed)
        return write_pages(copies)
    monkeypatch.setattr(index, "write_pages", noting)
    storage.checkpoint()  # its 16 dirty pages in two chunks: failed until the second is durable
    assert failed_at_write == [True, True]
    assert storage.index_failures() == {"ledgers_failed": 1, "damaged_reads": 0, "pinned": 0}
    assert storage.add_entries([add_op(big, 1)]).result(30) == [pb.OK]
    storage.close()
    storage = open_storage()
    written = [page << 10 for page in range(3 * CHUNK_PAGES)] + [1]
    assert [storage.read_entry(big, entry_id) for entry_id in written] == [body(big, e) for e in written]
    assert [storage.read_entry(ledger_id, 0) for ledger_id in others] == [body(ledger_id, 0) for ledger_id in others]


def test_chunks_cover_the_keys_in_order():
    keys = list(range(10))
    assert list(checkpoint.chunks(keys, 4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert list(checkpoint.chunks(keys, 0)) == [[key] for key in keys]
    assert list(checkpoint.chunks([], 4)) == []
