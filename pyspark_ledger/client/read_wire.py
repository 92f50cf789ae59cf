"""Read answers as the client receives them: a ReadResponse of large entries decoded where it arrived.

gRPC hands the client each ReadResponse as one ``bytes`` object (a range read: up to
``read_batch_bytes``, 8 MiB by default). Decoded by protobuf, every body is copied into the message and
copied again into a new ``bytes`` object when its field is read: two more passes over every byte read,
each in freshly allocated (page-faulted) memory, before the digest check reads it once more
(docs/measurements.md, "Spark batch reads: where a worker's time goes"). So the client's Read calls
are made with ``decode_read_response`` as the response deserializer:

* an answer whose entries are all large (``LARGE_ENTRY_BYTES`` or more each, as encoded) and in the
  canonical encoding (what protobuf and the bookie's ``bookie_server.read_wire`` write: fields in number
  order, the scalar ones at most once, no unknown field) is decoded here, each body a read-only
  ``memoryview`` of the received bytes, never copied; the bodies keep the whole answer alive;
* any other answer (small entries, where protobuf is the faster decoder, an error, anything unusual) is
  decoded by protobuf as before. Both give the same fields for every answer the first one takes (the
  tests compare them), and bytes protobuf cannot decode fail the same way (``FromString`` raises).
"""
from __future__ import annotations

from typing import NamedTuple

from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.varint import as_int64, decode_varint as _varint

LARGE_ENTRY_BYTES = 32 * 1024  # an encoded Entry at least this long is decoded in place (below, protobuf is faster)
_STATUS, _MESSAGE, _ENTRIES, _LAC, _LAST_ENTRY, _FENCED = 0x08, 0x12, 0x1A, 0x20, 0x28, 0x30  # ReadResponse's tags
_ENTRY_ID, _BODY = 0x08, 0x12  # Entry's tags
_INT32_MAX = 2**31 - 1


class WireEntry(NamedTuple):
    """One ``pb.Entry`` decoded in place: its id and its body, a read-only view of the answer's bytes."""

    entry_id: int
    body: memoryview


class WireReadResponse(NamedTuple):
    """The fields of ``pb.ReadResponse`` the client reads, from an answer decoded in place."""

    status: int
    message: str
    entries: list[WireEntry]
    last_add_confirmed: int
    last_entry_id: int
    fenced: bool


def decode_read_response(raw: bytes) -> "WireReadResponse | pb.ReadResponse":
    """The ReadResponse in ``raw`` (see the module docstring); protobuf's DecodeError if it is not one."""
    decoded = _decode_in_place(raw) if len(raw) >= LARGE_ENTRY_BYTES else None
    return pb.ReadResponse.FromString(raw) if decoded is None else decoded


def _decode_in_place(raw: bytes) -> WireReadResponse | None:
    """The answer if it holds entries, all large, in the canonical encoding; None if it is anything else."""
    view = memoryview(raw).toreadonly()
    fields = {_STATUS: 0, _LAC: 0, _LAST_ENTRY: 0, _FENCED: 0}
    message = ""
    entries: list[WireEntry] = []
    end, position, last_tag = len(raw), 0, 0
    while position < end:
        tag = raw[position]
        if tag < last_tag or (tag == last_tag and tag != _ENTRIES):  # out of order, or a scalar repeated
            return None
        last_tag = tag
        position += 1
        if tag == _MESSAGE or tag == _ENTRIES:
            length, position = _varint(raw, position)
            if length < 0 or position + length > end:
                return None
            if tag == _MESSAGE:
                try:
                    message = str(raw[position:position + length], "utf-8")
                except UnicodeDecodeError:
                    return None  # protobuf refuses it
            else:
                entry = _decode_entry(raw, view, position, position + length) if length >= LARGE_ENTRY_BYTES else None
                if entry is None:
                    return None
                entries.append(entry)
            position += length
        elif tag in fields:
            value, position = _varint(raw, position)
            if position < 0:
                return None
            fields[tag] = value
        else:
            return None  # an unknown field, a tag of more than one byte, a wrong wire type
    status, fenced = fields[_STATUS], fields[_FENCED]
    if not entries or status > _INT32_MAX or fenced > 1:
        return None  # nothing to save, a negative or odd enum, a bool that is not 0 or 1: protobuf's call
    return WireReadResponse(status, message, entries, as_int64(fields[_LAC]), as_int64(fields[_LAST_ENTRY]),
                            fenced == 1)


def _decode_entry(raw: bytes, view: memoryview, position: int, end: int) -> WireEntry | None:
    """One Entry in ``raw[position:end]``: an optional entry_id, then the body, each once; else None."""
    entry_id = 0
    if raw[position] == _ENTRY_ID:
        entry_id, position = _varint(raw, position + 1)
        if position < 0 or position >= end:
            return None
    if raw[position] != _BODY:
        return None
    length, position = _varint(raw, position + 1)
    if length < 0 or position + length != end:
        return None
    return WireEntry(as_int64(entry_id), view[position:end])
