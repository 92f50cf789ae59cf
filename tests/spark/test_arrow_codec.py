"""Entries holding one Arrow record batch: encoding, zero-copy decoding, cutting into entries."""
from __future__ import annotations

import random

import pytest

pa = pytest.importorskip("pyarrow")  # the connector's extra: pip install 'pyspark-ledger[spark]'

from pyspark_ledger.entry import EntryCodec  # noqa: E402
from pyspark_ledger.errors import CorruptEntryError, EntryTooLargeError, InvalidArgumentError  # noqa: E402
from pyspark_ledger.spark.arrow_codec import decode_batch, encode_batch, entry_batches  # noqa: E402


def sample_batch(rows: int, start: int = 0, text_size: int = 8) -> pa.RecordBatch:
    ids = list(range(start, start + rows))
    return pa.record_batch({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"{i:0{text_size}d}" for i in ids], pa.string()),
        "tags": pa.array([[i % 3] * (i % 4) for i in ids], pa.list_(pa.int32())),
        "maybe": pa.array([None if i % 5 == 0 else i / 2 for i in ids], pa.float64()),
    })


def ids_of(batches) -> list[int]:
    return [value for batch in batches for value in batch.column("id").to_pylist()]


# --- encode / decode ----------------------------------------------------------------------


def test_round_trip_keeps_schema_and_values():
    batch = sample_batch(1000)
    decoded = decode_batch(encode_batch(batch))
    assert decoded.schema.equals(batch.schema, check_metadata=True)
    assert decoded.equals(batch)


def test_round_trip_through_the_entry_format():
    batch = sample_batch(100)
    codec = EntryCodec("crc32c")
    body = codec.encode(7, 3, 2, 4096, encode_batch(batch))
    assert decode_batch(codec.decode(body, 7, 3).payload).equals(batch)


def test_decoding_is_zero_copy():
    payload = encode_batch(sample_batch(10_000))
    base = pa.py_buffer(payload)
    decoded = decode_batch(base)
    start, end = base.address, base.address + base.size
    for column in decoded.columns:
        for buffer in column.buffers():
            if buffer is not None and buffer.size:
                assert start <= buffer.address < end
    assert decode_batch(memoryview(payload)).equals(decoded)
    assert decode_batch(bytearray(payload)).equals(decoded)


def test_empty_batch_and_schema_metadata_round_trip():
    schema = pa.schema([pa.field("a", pa.int32(), nullable=False)], metadata={b"k": b"v"})
    empty = pa.RecordBatch.from_arrays([pa.array([], pa.int32())], schema=schema)
    decoded = decode_batch(encode_batch(empty))
    assert decoded.num_rows == 0 and decoded.schema.equals(schema, check_metadata=True)


def test_a_slice_encodes_only_its_rows():
    batch = sample_batch(10_000)
    whole, tenth = len(encode_batch(batch)), len(encode_batch(batch.slice(5000, 1000)))
    assert tenth < whole / 5
    assert decode_batch(encode_batch(batch.slice(5000, 1000))).equals(batch.slice(5000, 1000))


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_entries_are_smaller_and_decode_without_a_setting(compression):
    batch = sample_batch(10_000, text_size=40)  # zero-padded numbers: compressible
    plain, packed = encode_batch(batch), encode_batch(batch, compression)
    assert len(packed) < len(plain) * 0.7
    assert encode_batch(batch, "none") == plain
    decoded = decode_batch(packed, full_validation=True)
    assert decoded.equals(batch) and decoded.schema.equals(batch.schema, check_metadata=True)


def test_an_unknown_compression_is_refused_naming_the_choices():
    with pytest.raises(InvalidArgumentError, match="compression must be one of none, lz4, zstd, got 'gzip'"):
        encode_batch(sample_batch(3), "gzip")


def test_encode_refuses_non_batches():
    with pytest.raises(InvalidArgumentError, match="pyarrow.RecordBatch, got Table"):
        encode_batch(pa.table({"a": [1]}))


def two_batch_stream() -> bytes:
    sink = pa.BufferOutputStream()
    batch = sample_batch(3)
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def schema_only_stream() -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, sample_batch(1).schema):
        pass
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("payload, fragment", [
    (b"", "not an Arrow IPC stream"),
    (b"hello world, not arrow", "not an Arrow IPC stream"),
    (encode_batch(sample_batch(50))[:-200], "not an Arrow IPC stream"),
    (two_batch_stream(), "more than one Arrow record batch"),
    (schema_only_stream(), "without a record batch"),
], ids=["empty", "text", "truncated", "two-batches", "no-batch"])
def test_corrupt_payloads_raise_corrupt_entry_error(payload, fragment):
    with pytest.raises(CorruptEntryError, match=fragment):
        decode_batch(payload)


def test_flipped_bytes_never_crash_the_decoder():
    payload = bytearray(encode_batch(sample_batch(20)))
    rng = random.Random(11)
    outcomes = {"refused": 0, "decoded": 0}
    for _ in range(300):
        damaged = bytearray(payload)
        damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        try:
            batch = decode_batch(bytes(damaged), full_validation=True)
        except CorruptEntryError:
            outcomes["refused"] += 1
        else:
            batch.to_pylist()  # a fully validated batch is safe to touch
            outcomes["decoded"] += 1
    assert outcomes["refused"] > 0 and outcomes["decoded"] > 0  # flips in data bytes go unnoticed


def test_a_batch_claiming_more_rows_than_it_holds_is_refused():
    payload = bytearray(encode_batch(pa.record_batch({"a": pa.array([1, 2, 3], pa.int64())})))
    length_at = payload.find((3).to_bytes(8, "little"))  # the batch's row count in its metadata
    payload[length_at] = 200  # claim 200 rows over a buffer of 3
    with pytest.raises(CorruptEntryError, match="not an Arrow IPC stream"):
        decode_batch(bytes(payload))


# --- cutting into entries ------------------------------------------------------------------


def test_large_batches_are_sliced_without_copying():
    batch = sample_batch(25_000)
    pieces = list(entry_batches([batch], rows_per_entry=10_000))
    assert [piece.num_rows for piece in pieces] == [10_000, 10_000, 5000]
    assert ids_of(pieces) == list(range(25_000))
    address = batch.column("id").buffers()[1].address
    assert pieces[1].column("id").buffers()[1].address == address  # a slice of the same buffer


def test_small_batches_are_coalesced_up_to_rows_per_entry():
    batches = [sample_batch(300, start) for start in range(0, 3000, 300)]
    pieces = list(entry_batches(batches, rows_per_entry=1000))
    assert [piece.num_rows for piece in pieces] == [1000, 1000, 1000]
    assert ids_of(pieces) == list(range(3000))


def test_mixed_sizes_keep_order_and_limits():
    rng = random.Random(5)
    batches, start = [], 0
    for _ in range(60):
        rows = rng.choice([0, 1, 7, 250, 999, 1000, 1001, 4000])
        batches.append(sample_batch(rows, start))
        start += rows
    pieces = list(entry_batches(batches, rows_per_entry=1000))
    assert ids_of(pieces) == list(range(start))
    assert all(0 < piece.num_rows <= 1000 for piece in pieces)
    assert sum(piece.num_rows < 1000 for piece in pieces) <= 30  # coalescing leaves few short ones


def test_byte_limit_splits_wide_rows():
    batch = sample_batch(2000, text_size=2000)  # ~2 KB per row
    pieces = list(entry_batches([batch], rows_per_entry=10_000, max_entry_bytes=256 * 1024))
    assert all(piece.nbytes <= 256 * 1024 for piece in pieces)
    assert len(pieces) >= 2000 * 2000 // (256 * 1024)
    assert ids_of(pieces) == list(range(2000))
    assert all(len(encode_batch(piece)) < 300 * 1024 for piece in pieces)


def test_uneven_rows_are_halved_until_they_fit():
    names = ["x" * (50_000 if i == 7 else 10) for i in range(16)]
    batch = pa.record_batch({"id": list(range(16)), "name": names})
    pieces = list(entry_batches([batch], rows_per_entry=100, max_entry_bytes=60_000))
    assert all(piece.nbytes <= 60_000 for piece in pieces)
    assert ids_of(pieces) == list(range(16))


def test_a_single_row_over_the_limit_is_refused():
    batch = pa.record_batch({"id": [1], "blob": [b"x" * 5000]})
    with pytest.raises(EntryTooLargeError, match="single row of .* larger than an entry may be"):
        list(entry_batches([batch], max_entry_bytes=1000))


def test_batches_of_other_schemas_are_not_merged():
    first = pa.record_batch({"id": [1, 2]})
    second = pa.record_batch({"id": pa.array([3], pa.int32())})
    pieces = list(entry_batches([first, second], rows_per_entry=10))
    assert [piece.schema for piece in pieces] == [first.schema, second.schema]


def test_no_input_gives_no_entries():
    assert list(entry_batches([])) == []
    assert list(entry_batches([sample_batch(0)])) == []


@pytest.mark.parametrize("rows, size", [(0, 10), (-1, 10), (10, 0), (True, 10), (10, 1.5)])
def test_limits_must_be_positive_integers(rows, size):
    with pytest.raises(InvalidArgumentError, match="must be a positive integer"):
        list(entry_batches([sample_batch(1)], rows_per_entry=rows, max_entry_bytes=size))
