"""One Arrow record batch per ledger entry: encode, decode, and cut batches into entries.

An entry's payload is a complete Arrow IPC stream: the schema message, one
record batch message and the end-of-stream marker. The alternative, a bare
record batch message per entry with the schema kept once per ledger in its
custom metadata, would save a few hundred bytes and some microseconds per
entry, little next to replicating the entry (docs/measurements.md, "Arrow
entry framing"). The self-describing stream buys a lot: any entry decodes
alone (no schema lookup before the first read of a ledger, the CLI can dump an
entry), a ledger needs no schema in its metadata, and a stream's schema can
change between entries without breaking old ones. So the stream it is. Buffer
compression (``encode_batch(batch, "zstd")``, the sink's option
``compression``) is off by default: it costs the writer and every reader CPU
per entry and pays only where the data compresses; where it does, it saves the
bookies' and the client's per-byte work (docs/measurements.md, "Spark I/O on 2
shared cores, issue 16"). Decoding needs no setting: Arrow's IPC reader decompresses.

Decoding is zero-copy for uncompressed entries: the batch's buffers point into the payload. Cutting
(``entry_batches``) slices large batches without copying and fills each entry
with ``rows_per_entry`` rows (concatenating small batches), keeping it under
``max_entry_bytes``.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import pyarrow as pa

from pyspark_ledger.errors import CorruptEntryError, EntryTooLargeError, InvalidArgumentError
from pyspark_ledger.spark.option_values import COMPRESSIONS
from pyspark_ledger.spark.options import DEFAULT_ROWS_PER_ENTRY
from pyspark_ledger.spark.schema import child_fields

MiB = 1024 * 1024
# The bookie's default --max-entry-size is 5 MiB; keep 1 MiB for IPC framing and the entry header.
DEFAULT_MAX_ENTRY_BYTES = 4 * MiB


#: IPC options per buffer compression (the sink's option ``compression``); Arrow's IPC reader decompresses
#: any of them, so readers need no setting.
_WRITE_OPTIONS = {name: pa.ipc.IpcWriteOptions(compression=None if name == "none" else name, use_threads=False)
                  for name in COMPRESSIONS}


def encode_batch(batch: pa.RecordBatch, compression: str = "none") -> bytes:
    """The entry payload holding ``batch``: an Arrow IPC stream (schema, batch, end), its buffers
    compressed with ``compression`` (one of ``COMPRESSIONS``)."""
    if not isinstance(batch, pa.RecordBatch):
        raise InvalidArgumentError(f"an entry holds a pyarrow.RecordBatch, got {type(batch).__name__}")
    options = _WRITE_OPTIONS.get(compression)
    if options is None:
        raise InvalidArgumentError(f"compression must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def decode_batch(payload: bytes | bytearray | memoryview | pa.Buffer, *,
                 full_validation: bool = False) -> pa.RecordBatch:
    """The record batch of an entry payload, its buffers pointing into ``payload``.

    CorruptEntryError if the payload is not an Arrow IPC stream of exactly one
    valid batch. Buffer sizes are always checked (cheap); ``full_validation``
    also checks every offset and string (costly for large batches) and is for
    payloads that did not pass an entry digest check.
    """
    buffer = payload if isinstance(payload, pa.Buffer) else pa.py_buffer(payload)
    try:
        reader = pa.ipc.open_stream(buffer)
        batch = reader.read_next_batch()
        _expect_end(reader)
        batch.validate(full=full_validation)
        _check_names(batch.schema, nested=full_validation)
    except StopIteration as exc:
        raise CorruptEntryError("entry payload is an Arrow stream without a record batch") from exc
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise CorruptEntryError(
            f"entry payload of {buffer.size} bytes is not an Arrow IPC stream: {exc}") from exc
    return batch


def _check_names(fields, *, nested: bool) -> None:
    """Read every field name (UnicodeDecodeError if one is not UTF-8), nested ones too if asked."""
    for field in fields:
        field.name  # noqa: B018 - decoding the name is the check
        if nested:
            _check_names(child_fields(field.type), nested=True)


def _expect_end(reader: pa.ipc.RecordBatchStreamReader) -> None:
    try:
        reader.read_next_batch()
    except StopIteration:
        return
    raise CorruptEntryError("entry payload holds more than one Arrow record batch")


def entry_batches(batches: Iterable[pa.RecordBatch], rows_per_entry: int = DEFAULT_ROWS_PER_ENTRY,
                  max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES) -> Iterator[pa.RecordBatch]:
    """Re-cut ``batches`` into entry-sized ones, in order, without losing or repeating a row.

    Each yielded batch has ``rows_per_entry`` rows (the last, and those cut short by
    ``max_entry_bytes`` by Arrow's byte count or by a schema change, fewer);
    empty batches are dropped. Slices share memory with the input; only rows of
    several input batches that share an entry are concatenated (copied).
    """
    _check_limits(rows_per_entry, max_entry_bytes)
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for piece in _pieces(batches, rows_per_entry, max_entry_bytes):
        while piece is not None:
            head, rest = _head_that_fits(piece, pending, rows_per_entry - rows, max_entry_bytes - size)
            if head is not None:
                pending.append(head)
                rows, size = rows + head.num_rows, size + head.nbytes
                piece = rest
            if head is None or rows == rows_per_entry:
                yield _combine(pending)
                pending, rows, size = [], 0, 0
    if pending:
        yield _combine(pending)


def _head_that_fits(piece: pa.RecordBatch, pending: list[pa.RecordBatch], room_rows: int,
                    room_bytes: int) -> tuple[pa.RecordBatch | None, pa.RecordBatch | None]:
    """The leading rows of ``piece`` that fit the open entry (None: close it first), and the rest."""
    if pending and not piece.schema.equals(pending[0].schema):
        return None, piece
    take = min(piece.num_rows, room_rows)
    head = piece if take == piece.num_rows else piece.slice(0, take)
    if take == 0 or (pending and head.nbytes > room_bytes):
        return None, piece
    return head, (None if take == piece.num_rows else piece.slice(take))


def _check_limits(rows_per_entry: int, max_entry_bytes: int) -> None:
    for name, value in (("rows_per_entry", rows_per_entry), ("max_entry_bytes", max_entry_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")


def _pieces(batches: Iterable[pa.RecordBatch], rows_per_entry: int,
            max_entry_bytes: int) -> Iterator[pa.RecordBatch]:
    """Zero-copy slices of each batch, none over either limit."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        step = min(rows_per_entry, _rows_within(batch, max_entry_bytes))
        for offset in range(0, batch.num_rows, step):
            yield from _split_oversized(batch.slice(offset, step), max_entry_bytes)


def _rows_within(batch: pa.RecordBatch, max_entry_bytes: int) -> int:
    """How many rows of ``batch`` fit ``max_entry_bytes`` at its mean row size."""
    return max(1, batch.num_rows * max_entry_bytes // max(batch.nbytes, 1))


def _split_oversized(piece: pa.RecordBatch, max_entry_bytes: int) -> Iterator[pa.RecordBatch]:
    """Halve a slice until it fits (rows of uneven size); a single row too big is an error."""
    if piece.nbytes <= max_entry_bytes:
        yield piece
        return
    if piece.num_rows == 1:
        raise EntryTooLargeError(
            f"a single row of {piece.nbytes} bytes is larger than an entry may be "
            f"({max_entry_bytes} bytes): store large values elsewhere, or raise the bookies' "
            "--max-entry-size and the writer's entry size limit together")
    half = piece.num_rows // 2
    yield from _split_oversized(piece.slice(0, half), max_entry_bytes)
    yield from _split_oversized(piece.slice(half), max_entry_bytes)


def _combine(pending: list[pa.RecordBatch]) -> pa.RecordBatch:
    return pending[0] if len(pending) == 1 else pa.concat_batches(pending)
