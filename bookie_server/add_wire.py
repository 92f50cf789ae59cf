"""AddStream requests as the bookie receives them: each AddBatch decoded from its wire bytes, large bodies left
where they arrived.

gRPC hands the bookie each AddBatch as one bytes object. Decoded by protobuf, a body is copied into the
message, copied again into a new bytes object each time its field is read, and ``ByteSize()`` serializes
the whole message once more (upb has no other way to size it): for a 1 MiB entry, four more megabytes
touched before the bookie stores one. So the AddStream method is registered without a deserializer
(``register_bookie_service``) and ``decode_add_batch`` runs on the stream's reader thread instead:

* a batch whose adds are all large (``LARGE_ADD_BYTES`` or more each, as encoded) and in the canonical
  encoding (what protobuf and the client's ``AddEncoder`` write: an add's fields in number order, each at
  most once, no unknown field) is decoded here, each body a ``memoryview`` of the received bytes, never
  copied (``ReceivedBatch.in_place``);
* any other batch (small adds, where protobuf is the faster decoder, or anything unusual) is decoded by
  protobuf as before. Both paths give the same adds for every batch the first one takes (the tests compare
  them), and bytes protobuf cannot decode fail the same way: ``FromString`` raises, gRPC ends the call.

The received size is the batch's length on the wire (``ReceivedBatch.nbytes``), what the in-flight byte
budgets are charged with.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import grpc

from bookie_server.read_wire import serialize_read_response
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from pyspark_ledger.wire.v1 import bookie_pb2_grpc as pb_grpc
from pyspark_ledger.wire.varint import as_int64, decode_varint as _varint

LARGE_ADD_BYTES = 32 * 1024  # an encoded add at least this long is decoded in place (below, protobuf is faster)
_ADD = 0x0A  # AddBatch.adds: field 1, length-delimited
_LEDGER_ID, _ENTRY_ID, _MASTER_KEY, _BODY, _RECOVERY = 0x08, 0x10, 0x1A, 0x22, 0x28  # AddRequest's tags


class WireAdd(NamedTuple):
    """One add decoded in place: the fields of ``pb.AddRequest`` the bookie reads, with the body a view."""

    ledger_id: int
    entry_id: int
    master_key: bytes
    body: memoryview
    recovery: bool


class ReceivedBatch:
    """A decoded AddBatch: ``adds`` (``pb.AddRequest``s or ``WireAdd``s), its size on the wire, and whether
    its bodies are views of the received bytes (which they keep alive: see ``AddStreamSession``)."""

    __slots__ = ("adds", "nbytes", "in_place")

    def __init__(self, adds: Sequence, nbytes: int, in_place: bool) -> None:
        self.adds, self.nbytes, self.in_place = adds, nbytes, in_place


def decode_add_batch(raw: bytes) -> ReceivedBatch:
    """The AddBatch in ``raw`` (see the module docstring); protobuf's DecodeError if it is not one."""
    adds = _decode_in_place(raw) if len(raw) >= LARGE_ADD_BYTES else None
    if adds is None:
        # a list: iterating the message's own sequence ends on an IndexError made and dropped (~2,000 instructions)
        return ReceivedBatch(pb.AddBatch.FromString(raw).adds[:], len(raw), False)
    return ReceivedBatch(adds, len(raw), True)


def register_bookie_service(servicer, server: grpc.Server) -> None:
    """Add the Bookie service to ``server`` as the generated code does, but with AddStream's requests handed over
    as ``ReceivedBatch``es (``decode_add_batch``) instead of protobuf messages, and Read's answers encoded by
    ``read_wire`` when they hold large entries."""
    recorder = _HandlerRecorder()
    pb_grpc.add_BookieServicer_to_server(servicer, recorder)
    handlers = dict(recorder.handlers)
    handlers["AddStream"] = grpc.stream_stream_rpc_method_handler(
        servicer.AddStream, request_deserializer=decode_add_batch,
        response_serializer=pb.AddResultBatch.SerializeToString)
    handlers["Read"] = grpc.unary_unary_rpc_method_handler(  # large answers encoded by read_wire
        servicer.Read, request_deserializer=pb.ReadRequest.FromString, response_serializer=serialize_read_response)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(recorder.service, handlers),))
    server.add_registered_method_handlers(recorder.service, handlers)


class _HandlerRecorder:
    """Stands in for a server to take the generated method handlers (the generated code registers them twice)."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict = {}

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.service, self.handlers = service, handlers


def _decode_in_place(raw: bytes) -> list[WireAdd] | None:
    """The adds of a batch of large adds in the canonical encoding; None if it is anything else."""
    view = memoryview(raw)
    end = len(raw)
    adds = []
    position = 0
    while position < end:
        if raw[position] != _ADD:
            return None
        length, position = _varint(raw, position + 1)
        if length < LARGE_ADD_BYTES or position + length > end:
            return None
        add = _decode_add(raw, view, position, position + length)
        if add is None:
            return None
        adds.append(add)
        position += length
    return adds


def _decode_add(raw: bytes, view: memoryview, position: int, end: int) -> WireAdd | None:
    """One AddRequest in ``raw[position:end]``, fields in number order, each at most once; else None."""
    ledger_id = entry_id = 0
    master_key = b""
    body = None
    recovery = False
    last_tag = 0
    while position < end:
        tag = raw[position]
        if tag <= last_tag:  # out of order, repeated, or a tag of more than one byte (none of ours)
            return None
        last_tag = tag
        position += 1
        if tag == _LEDGER_ID:
            ledger_id, position = _varint(raw, position)
        elif tag == _ENTRY_ID:
            entry_id, position = _varint(raw, position)
            entry_id = as_int64(entry_id)
        elif tag == _MASTER_KEY or tag == _BODY:
            length, position = _varint(raw, position)
            if length < 0 or position + length > end:
                return None
            if tag == _MASTER_KEY:
                master_key = raw[position:position + length]
            else:
                body = view[position:position + length]
            position += length
        elif tag == _RECOVERY:
            value, position = _varint(raw, position)
            if value not in (0, 1):
                return None
            recovery = value == 1
        else:
            return None
        if position < 0 or position > end:
            return None
    if body is None:
        return None
    return WireAdd(ledger_id, entry_id, master_key, body, recovery)
