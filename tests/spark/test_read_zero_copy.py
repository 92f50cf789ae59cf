"""Reads that hand out payloads without copying them (``copy=False``): what the Spark reader uses.

The digest and the ids are verified exactly as for copied payloads; only the
type of ``data`` changes (a read-only memoryview into the bookie's answer).
"""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.client.read_wire import LARGE_ENTRY_BYTES
from pyspark_ledger.entry import EntryCodec
from pyspark_ledger.errors import CorruptEntryError
from pyspark_ledger.spark.arrow_codec import decode_batch, encode_batch

PASSWORD = b"zero-copy"


def encoded(codec: EntryCodec, payload: bytes, entry_id: int = 0) -> bytes:
    return codec.encode(7, entry_id, entry_id - 1, len(payload), payload)


@pytest.mark.parametrize("digest", ["crc32c", "hmac-sha256"])
def test_decode_without_copy_gives_a_read_only_view_of_the_verified_payload(digest):
    codec = EntryCodec(digest, PASSWORD)
    body = encoded(codec, b"payload bytes")
    copied, viewed = codec.decode(body, 7, 0), codec.decode(body, 7, 0, copy=False)
    assert type(copied.payload) is bytes and copied.payload == b"payload bytes"
    assert isinstance(viewed.payload, memoryview) and viewed.payload.readonly
    assert viewed.payload == b"payload bytes" and viewed.payload.obj is body
    writable = codec.decode(bytearray(body), 7, 0, copy=False).payload
    assert writable.readonly and bytes(writable) == b"payload bytes"


def test_decode_without_copy_still_rejects_corrupt_entries_and_wrong_ids():
    codec = EntryCodec("crc32c")
    body = bytearray(encoded(codec, b"x" * 100, entry_id=3))
    with pytest.raises(CorruptEntryError, match="asked for ledger 7 entry 4"):
        codec.decode(bytes(body), 7, 4, copy=False)
    body[-1] ^= 1
    with pytest.raises(CorruptEntryError, match="digest mismatch"):
        codec.decode(bytes(body), 7, 3, copy=False)


@pytest.fixture(scope="module")
def client(cluster):
    ledger_client = LedgerClient(cluster.metadata_uri)
    try:
        yield ledger_client
    finally:
        ledger_client.close()


@pytest.fixture(scope="module")
def written(client):
    """A closed ledger of 40 entries of 0-200 KiB (several range reads), and its payloads."""
    payloads = [os.urandom(5000 * (index % 41)) for index in range(40)]
    with client.create_ledger(3, 3, 2, password=PASSWORD) as writer:
        for future in [writer.append_async(payload) for payload in payloads]:
            future.result()
        ledger_id = writer.ledger_id
    return ledger_id, payloads


def test_a_ledger_read_without_copies_matches_the_copied_read(client, written):
    ledger_id, payloads = written
    reader = client.open_ledger(ledger_id, PASSWORD, recovery=False)
    viewed = list(reader.read(0, len(payloads) - 1, copy=False))
    copied = list(reader.read(0, len(payloads) - 1))
    assert [entry.entry_id for entry in viewed] == list(range(len(payloads)))
    assert all(isinstance(entry.data, memoryview) and entry.data.readonly for entry in viewed)
    assert all(type(entry.data) is bytes for entry in copied)
    assert [bytes(entry.data) for entry in viewed] == [entry.data for entry in copied] == payloads


def test_arrow_batches_decode_from_uncopied_payloads_and_outlive_the_read(client):
    batches = [pa.record_batch({"n": pa.array(range(i * 100, i * 100 + 100)), "s": pa.array([f"r{i}"] * 100)})
               for i in range(5)]
    with client.create_ledger(3, 3, 2, password=PASSWORD) as writer:
        for batch in batches:
            writer.append(encode_batch(batch))
        ledger_id = writer.ledger_id
    reader = client.open_ledger(ledger_id, PASSWORD, recovery=False)
    decoded = [decode_batch(entry.data) for entry in reader.read(0, 4, copy=False)]
    del reader
    assert [batch.to_pylist() for batch in decoded] == [batch.to_pylist() for batch in batches]


def test_large_entries_are_read_as_views_of_the_bookies_answer_and_match_the_copied_read(client):
    payloads = [os.urandom(LARGE_ENTRY_BYTES + 1000 * i) for i in range(6)]
    with client.create_ledger(3, 3, 2, password=PASSWORD) as writer:
        for future in [writer.append_async(payload) for payload in payloads]:
            future.result()
        ledger_id = writer.ledger_id
    reader = client.open_ledger(ledger_id, PASSWORD, recovery=False)
    viewed = list(reader.read(0, len(payloads) - 1, copy=False))
    copied = list(reader.read(0, len(payloads) - 1))
    assert all(isinstance(entry.data, memoryview) and entry.data.readonly for entry in viewed)
    # decoded in place (client/read_wire.py): every payload is a view of the one answer that held them all
    assert len({id(entry.data.obj) for entry in viewed}) == 1
    assert [bytes(entry.data) for entry in viewed] == [entry.data for entry in copied] == payloads
