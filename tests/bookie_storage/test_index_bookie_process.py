"""Issue 12 parts 1 and 5 with a real bookie process: the largest entry id the edge accepts (2**39-1; the index
itself takes any int64, see test_index_layout) and a damaged index file do not stop
the bookie; a damaged slot is answered IO_ERROR (an unknown to the client), never NO_SUCH_ENTRY."""
from __future__ import annotations

from bookie_server.index import LedgerIndex
from bookie_server.limits import MAX_ENTRY_ID
from bookie_server.index_format import DISK_SLOT_BYTES, PAGE_HEAD_BYTES, record_offset
from pyspark_ledger.client import BookieClient, BookieStatus
from pyspark_ledger.entry import EntryCodec, master_key
from pyspark_ledger.testing.bookies import BookieProcess

KEY = master_key(b"index-process-test")
CODEC = EntryCodec()
HUGE = MAX_ENTRY_ID


def entry(ledger_id: int, entry_id: int) -> bytes:
    return CODEC.encode(ledger_id, entry_id, entry_id - 1, 0, f"ledger {ledger_id} entry {entry_id}".encode() * 8)


def read_one(client: BookieClient, ledger_id: int, entry_id: int):
    return client.read(ledger_id, entry_id, entry_id, master_key=KEY)


def test_bookie_survives_huge_entry_ids_and_answers_index_damage_as_an_error(tmp_path):
    metadata = f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2&poll_interval=0.1"
    bookie = BookieProcess(tmp_path / "bookie", metadata, checkpoint_interval=0.2,
                           no_verify_new_ledgers=True)  # raw ledger ids without metadata: no ledger guard
    client = None
    try:
        bookie.start()
        client = BookieClient(bookie.bookie_id, timeout=30.0)
        stream = client.add_stream(max_inflight=64)
        adds = [(ledger_id, entry_id) for ledger_id in (1, 2) for entry_id in range(10)]
        adds += [(3, HUGE - 1), (3, HUGE)]  # the largest ids the edge accepts: an 8 TiB sparse file in the v1 layout
        futures = [stream.add(ledger_id, entry_id, KEY, entry(ledger_id, entry_id)) for ledger_id, entry_id in adds]
        assert all(future.result(30).ok for future in futures)
        assert stream.add(1, 10, KEY, entry(1, 10)).result(30).ok  # after background checkpoints, still OK
        adds.append((1, 10))
        stream.close()
        client.close()
        client = None
        assert bookie.stop() == 0  # a clean stop: the final checkpoint wrote every index file

        path = LedgerIndex(bookie.data_dir / "index", 1).index_path(2)
        with open(path, "r+b") as file:  # zero ledger 2's slot of entry 5 (its file has one page record)
            file.seek(record_offset(0) + PAGE_HEAD_BYTES + 5 * DISK_SLOT_BYTES)
            file.write(bytes(DISK_SLOT_BYTES))

        bookie.start()  # starts with a damaged index file
        client = BookieClient(bookie.bookie_id, timeout=30.0)
        for ledger_id, entry_id in adds:
            reply = read_one(client, ledger_id, entry_id)
            if (ledger_id, entry_id) == (2, 5):
                assert reply.status == BookieStatus.IO_ERROR, (reply.status, reply.message)
            else:
                assert reply.status == BookieStatus.OK, (ledger_id, entry_id, reply.status, reply.message)
                assert reply.entries[0][1] == entry(ledger_id, entry_id)
        assert read_one(client, 2, 10).status == BookieStatus.NO_SUCH_ENTRY  # true absence is still absence
        stream = client.add_stream(max_inflight=8)
        assert stream.add(1, 11, KEY, entry(1, 11)).result(30).ok
        assert stream.add(2, 10, KEY, entry(2, 10)).result(30).ok  # the page loads: the damage is one slot
        stream.close()
        assert "is damaged" in (bookie.data_dir / "bookie-stderr.log").read_text()
    finally:
        if client is not None:
            client.close()
        bookie.kill()
