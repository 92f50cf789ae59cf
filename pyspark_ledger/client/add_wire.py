"""Adds on the wire: one encoding per entry shared by its whole write set, and per-add answers as Futures.

``encode_add`` writes an ``AddRequest`` exactly as it appears inside an
``AddBatch`` (field 1: tag, length, message; see bookie.proto), so a batch
is the concatenation of its adds and an entry's bytes are built once, with a
single copy of the body, whatever the number of bookies it goes to. Equal,
byte for byte, to what protobuf serializes (checked by the tests).

``FutureAnswers`` is an add-stream listener that completes one
``concurrent.futures.Future`` per add with an ``AddResult``: the convenient
form for tools and tests; the writer listens per batch instead. ``AckedAdd`` is an OK answer taken out
of a run (docs/protocol.md W9) for a listener that only takes results.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import NamedTuple

from pyspark_ledger.client.rpc_errors import BookieStatus, as_status
from pyspark_ledger.errors import BookieError, EntryTooLargeError, InvalidArgumentError, InvalidStateError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.varint import encode_varint as varint

_ADDS_FIELD = b"\x0a"         # AddBatch.adds: field 1, length-delimited
_LEDGER_ID = b"\x08"          # AddRequest.ledger_id: field 1, varint
_ENTRY_ID = b"\x10"           # AddRequest.entry_id: field 2, varint (int64: negatives take 10 bytes)
_MASTER_KEY = b"\x1a"         # AddRequest.master_key: field 3, length-delimited
_BODY = b"\x22"               # AddRequest.body: field 4, length-delimited
_RECOVERY = b"\x28\x01"       # AddRequest.recovery = true: field 5, varint 1
_UINT64 = 2**64
_SIZES_KEPT = 64  # body sizes an AddEncoder keeps the length fields of
SPLIT_PAYLOAD_BYTES = 64 * 1024  # a writer's payload this large is not copied into its add's bytes (``LargeAdd``)


class LargeAdd:
    """An encoded add whose payload is ``SPLIT_PAYLOAD_BYTES`` or more, kept as two parts, the bytes before the
    payload and the payload itself, so that the payload is never copied into one ``bytes`` (for 1 MiB entries the
    copy, into memory the allocator had just given back to the system, cost the client about a seventh of its CPU).
    A framed stream writes the two parts one after the other; ``bytes()`` joins them where one buffer is needed
    (a gRPC stream, tools). ``len()`` is the joined length. Such an add is always written alone
    (``add_queue.WRITE_ALONE_BYTES``)."""

    __slots__ = ("head", "payload", "_size")

    def __init__(self, head: bytes, payload: bytes) -> None:
        self.head, self.payload = head, payload
        self._size = len(head) + len(payload)

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        return self.head + self.payload


@dataclass(frozen=True, slots=True)
class AddResult:
    """The bookie's answer to one add."""

    status: BookieStatus
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == BookieStatus.OK


ADD_OK = AddResult(BookieStatus.OK)


class AckedAdd(NamedTuple):
    """An add answered OK within a run (docs/protocol.md W9), for a listener that takes only results."""

    ledger_id: int
    entry_id: int
    status: int = pb.OK
    message: str = ""


def as_results(spans: list[tuple[int, range]]) -> list[AckedAdd]:
    """Runs of OK answers as one result each (for listeners that take only results)."""
    return [AckedAdd(ledger_id, entry_id) for ledger_id, entry_ids in spans for entry_id in entry_ids]


def encode_add(ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool = False) -> bytes:
    """The AddBatch field holding one AddRequest; InvalidArgumentError for what the wire cannot carry."""
    check_add(ledger_id, entry_id, master_key, body)
    return AddEncoder(ledger_id, master_key).encode(entry_id, body, recovery)


class AddEncoder:
    """Encodes the adds of one ledger and master key, their common bytes made once (a writer's hot path).

    The bytes that depend only on the body's size and the entry id's varint length (the add's own length, the
    ledger id and the entry id's tag before the id; the master key and the body's tag and length after it) are
    kept joined per shape, up to ``_SIZES_KEPT`` shapes: a writer's entries are mostly of a few sizes, and an add
    is then five pieces joined once."""

    __slots__ = ("_ledger", "_key", "_fixed", "_sizes")

    def __init__(self, ledger_id: int, master_key: bytes) -> None:
        check_add(ledger_id, 0, master_key, b"")
        # proto3 leaves out fields at their default (0, empty, false), as protobuf does
        self._ledger = _LEDGER_ID + varint(ledger_id) if ledger_id else b""
        self._key = _MASTER_KEY + varint(len(master_key)) + master_key if master_key else b""
        self._fixed = len(self._ledger) + len(self._key)
        self._sizes: dict[int, tuple[bytes, bytes]] = {}

    def encode(self, entry_id: int, body: bytes, recovery: bool = False) -> bytes:
        """One add (``entry_id`` a signed 64-bit int, ``body`` bytes), framed as a field of an AddBatch."""
        return bytes(self.encode_pieces(entry_id, b"", body, recovery))

    def encode_pieces(self, entry_id: int, head: bytes, payload: bytes, recovery: bool = False) -> bytes | LargeAdd:
        """``encode(entry_id, head + payload)`` without building the body first: one copy of the payload, or
        none when it is ``SPLIT_PAYLOAD_BYTES`` or more (a ``LargeAdd``, unless ``recovery``)."""
        if 0x4000 <= entry_id < 0x200000:  # a writer's ids past the first 16,384: ``varint`` inline
            entry = bytes((entry_id & 0x7F | 0x80, (entry_id >> 7) & 0x7F | 0x80, entry_id >> 14))
        else:
            entry = varint(entry_id % _UINT64) if entry_id else b""
        body_size = len(head) + len(payload)
        shape = body_size << 5 | len(entry) << 1 | bool(recovery)
        fields = self._sizes.get(shape)
        if fields is None:
            fields = self._size_fields(body_size, len(entry), recovery, shape)
        before, between = fields
        if recovery:
            return b"".join((before, entry, between, head, payload, _RECOVERY))
        if len(payload) >= SPLIT_PAYLOAD_BYTES:
            return LargeAdd(b"".join((before, entry, between, head)), payload)
        return b"".join((before, entry, between, head, payload))

    def _size_fields(self, body_size: int, entry_size: int, recovery: bool, shape: int) -> tuple[bytes, bytes]:
        """The bytes before the entry id's varint (the add's tag and length, the ledger id, the entry id's tag) and
        between it and the body's head (the master key, the body's tag and length), for this shape."""
        body_field = _BODY + varint(body_size) if body_size else b""
        size = self._fixed + (1 + entry_size if entry_size else 0) + len(body_field) + body_size + (
            len(_RECOVERY) if recovery else 0)
        fields = (_ADDS_FIELD + varint(size) + self._ledger + (_ENTRY_ID if entry_size else b""),
                  self._key + body_field)
        if len(self._sizes) >= _SIZES_KEPT:
            self._sizes.clear()
        self._sizes[shape] = fields
        return fields


def check_add(ledger_id: int, entry_id: int, master_key: bytes, body: bytes) -> None:
    """Refuse what the wire cannot carry (the bookie judges everything else)."""
    if (isinstance(ledger_id, bool) or isinstance(entry_id, bool) or not isinstance(ledger_id, int)
            or not isinstance(entry_id, int) or not 0 <= ledger_id < 2**64 or not -2**63 <= entry_id < 2**63):
        raise InvalidArgumentError(
            f"ledger id {ledger_id!r} / entry id {entry_id!r} out of range: ledger ids are unsigned 64-bit, "
            "entry ids signed 64-bit")
    if not isinstance(master_key, bytes) or not isinstance(body, bytes):
        raise InvalidArgumentError(
            f"master_key and body must be bytes, got {type(master_key).__name__} and {type(body).__name__}")


def check_payload(data, max_payload: int) -> bytes:
    """An entry's payload as bytes; InvalidArgumentError if it is not bytes-like, EntryTooLargeError if too large."""
    if type(data) is bytes and len(data) <= max_payload:  # the usual case, first: a writer checks every entry
        return data
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(
            f"an entry must be bytes-like, got {type(data).__name__}: encode text first (e.g. s.encode())")
    payload = bytes(data)
    if len(payload) > max_payload:
        raise EntryTooLargeError(
            f"entry of {len(payload)} bytes exceeds the largest entry of {max_payload} bytes "
            "(ClientConfig.max_entry_bytes, which must stay within the bookies' --max-entry-size): split it")
    return payload


class FutureAnswers:
    """An add-stream listener completing one Future per (ledger id, entry id)."""

    def __init__(self) -> None:
        self._futures: dict[tuple[int, int], Future] = {}
        self._lock = threading.Lock()

    def expect(self, ledger_id: int, entry_id: int) -> Future:
        future: Future = Future()
        with self._lock:
            if (ledger_id, entry_id) in self._futures:
                raise InvalidStateError(
                    f"ledger {ledger_id} entry {entry_id} is already in flight on this stream: wait for its "
                    "answer before re-sending it")
            self._futures[(ledger_id, entry_id)] = future
        return future

    def forget(self, ledger_id: int, entry_id: int) -> None:
        with self._lock:
            self._futures.pop((ledger_id, entry_id), None)

    def on_add_results(self, bookie_id: str, results: list) -> None:
        with self._lock:
            answered = [(self._futures.pop((r.ledger_id, r.entry_id), None), r) for r in results]
        for future, result in answered:
            if future is not None:
                future.set_result(ADD_OK if result.status == pb.OK
                                  else AddResult(as_status(result.status), result.message))

    def on_add_acks(self, bookie_id: str, spans: list[tuple[int, range]]) -> None:
        """Runs of OK answers (docs/protocol.md W9): ``(ledger id, range of entry ids)`` pairs."""
        with self._lock:
            answered = [self._futures.pop((ledger_id, entry_id), None)
                        for ledger_id, entry_ids in spans for entry_id in entry_ids]
        for future in answered:
            if future is not None:
                future.set_result(ADD_OK)

    def on_add_failure(self, bookie_id: str, keys: list[tuple[int, int]], error: BookieError) -> None:
        with self._lock:
            failed = [self._futures.pop(key, None) for key in keys]
        for future in failed:
            if future is not None:
                future.set_exception(error)
