"""Read answers as the bookie sends them: a ReadResponse of large entries encoded with one copy of each body.

Built as a protobuf message, an answer's bodies are copied into the message (``entries.add``) and again
by ``SerializeToString``, each time into freshly allocated memory, and reading ``entry.body`` back (to
count the bytes returned) copied each once more. ``read_response`` instead writes an answer whose
entries are all ``LARGE_BODY_BYTES`` or more by hand, exactly the bytes protobuf would write (fields in
number order, defaults left out; the tests compare them), as a list of pieces that refer to the bodies
without copying them; any other answer is a ``pb.ReadResponse`` as before. ``serialize_read_response``
is the Read method's response serializer (``add_wire.register_bookie_service``): gRPC needs one buffer,
so it joins an encoded answer's pieces (each body copied once) and serializes messages. The framed read
port sends the pieces as they are (``read_response_pieces``): the socket's copy is the only one.
"""
from __future__ import annotations

from typing import Sequence

from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.varint import encode_varint as _varint

LARGE_BODY_BYTES = 32 * 1024  # entries at least this long are encoded here (below, protobuf is as fast)
_STATUS, _MESSAGE, _ENTRIES, _LAC, _LAST_ENTRY, _FENCED = b"\x08", b"\x12", b"\x1a", b"\x20", b"\x28", b"\x30"
_ENTRY_ID, _BODY = b"\x08", b"\x12"
_UINT64 = 2**64


class EncodedReadResponse:
    """A ReadResponse already in its wire form (``read_response``): its bytes as ``pieces`` in order (``size`` in
    all; ``data`` joins them), its status, and the entry bytes it returns."""

    __slots__ = ("pieces", "size", "status", "returned_bytes")

    def __init__(self, pieces: list[bytes], status: int, returned_bytes: int) -> None:
        self.pieces, self.status, self.returned_bytes = pieces, status, returned_bytes
        self.size = sum(map(len, pieces))

    @property
    def data(self) -> bytes:
        """The answer in one buffer (a copy of every piece)."""
        return b"".join(self.pieces)


def read_response(status: int, message: str, entries: Sequence[tuple[int, bytes]], last_add_confirmed: int,
                  last_entry_id: int, fenced: bool) -> "EncodedReadResponse | pb.ReadResponse":
    """The answer with these fields: encoded here if it holds entries, all large; else a protobuf message."""
    if not entries or any(len(body) < LARGE_BODY_BYTES for _, body in entries):
        response = pb.ReadResponse(status=status, message=message, last_add_confirmed=last_add_confirmed,
                                   last_entry_id=last_entry_id, fenced=fenced)
        for entry_id, body in entries:
            response.entries.add(entry_id=entry_id, body=body)
        return response
    pieces: list[bytes] = []
    returned = 0
    if status:
        pieces += (_STATUS, _varint(status))
    if message:
        text = message.encode()
        pieces += (_MESSAGE, _varint(len(text)), text)
    for entry_id, body in entries:
        head = _ENTRY_ID + _varint(entry_id % _UINT64) if entry_id else b""
        length = _varint(len(body))
        pieces += (_ENTRIES, _varint(len(head) + 1 + len(length) + len(body)), head, _BODY, length, body)
        returned += len(body)
    for tag, value in ((_LAC, last_add_confirmed), (_LAST_ENTRY, last_entry_id)):
        if value:
            pieces += (tag, _varint(value % _UINT64))
    if fenced:
        pieces += (_FENCED, b"\x01")
    return EncodedReadResponse(pieces, status, returned)


def serialize_read_response(response: "EncodedReadResponse | pb.ReadResponse") -> bytes:
    """The Read method's response serializer: an encoded answer joined, a message serialized."""
    return response.data if isinstance(response, EncodedReadResponse) else response.SerializeToString()


def read_response_pieces(response: "EncodedReadResponse | pb.ReadResponse") -> tuple[list[bytes], int]:
    """The answer's wire bytes as buffers to send in order, and their total size: an encoded answer's pieces
    (no copy), a message serialized."""
    if isinstance(response, EncodedReadResponse):
        return response.pieces, response.size
    data = response.SerializeToString()
    return [data], len(data)


def returned_bytes(response: "EncodedReadResponse | pb.ReadResponse") -> int:
    """The entry bytes an answer returns (for the bookie's metrics)."""
    if isinstance(response, EncodedReadResponse):
        return response.returned_bytes
    return sum(len(entry.body) for entry in response.entries)  # small entries only: copies are cheap here
