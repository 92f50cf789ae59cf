"""Read answers of large entries on the wire: the bookie's hand encoder (bookie_server/read_wire.py) writes what
protobuf writes, and the client's decoder (pyspark_ledger/client/read_wire.py) reads what protobuf reads, the
bodies as views of the received bytes, never copied."""
from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from bookie_server.read_wire import (LARGE_BODY_BYTES, EncodedReadResponse, read_response, read_response_pieces,
                                     returned_bytes, serialize_read_response)
from pyspark_ledger.client.add_wire import varint
from pyspark_ledger.client.bookie_answers import read_result
from pyspark_ledger.client.read_wire import LARGE_ENTRY_BYTES, WireReadResponse, decode_read_response
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

LARGE = LARGE_BODY_BYTES + 100
INT64 = st.one_of(st.sampled_from([0, -1, 1, 2**63 - 1, -2**63]), st.integers(-2**63, 2**63 - 1))
large_bodies = st.integers(LARGE_BODY_BYTES, 3 * LARGE_BODY_BYTES).map(lambda n: bytes([n % 251]) * n)


def answer(raw: bytes) -> tuple:
    """Every field of a decoded answer, bodies as bytes, through the client's own conversion."""
    result = read_result(decode_read_response(raw))
    return (result.status, result.message, [(entry_id, bytes(body)) for entry_id, body in result.entries],
            result.last_add_confirmed, result.last_entry_id, result.fenced)


def protobuf_answer(raw: bytes) -> tuple:
    result = read_result(pb.ReadResponse.FromString(raw))
    return (result.status, result.message, [(entry_id, bytes(body)) for entry_id, body in result.entries],
            result.last_add_confirmed, result.last_entry_id, result.fenced)


def message_of(status, message, entries, lac, last, fenced) -> pb.ReadResponse:
    response = pb.ReadResponse(status=status, message=message, last_add_confirmed=lac, last_entry_id=last,
                               fenced=fenced)
    for entry_id, body in entries:
        response.entries.add(entry_id=entry_id, body=body)
    return response


@settings(max_examples=60, deadline=None)
@given(status=st.sampled_from([pb.OK, pb.NO_SUCH_ENTRY, pb.IO_ERROR]), message=st.text(max_size=20),
       entries=st.lists(st.tuples(INT64, large_bodies), min_size=1, max_size=4), lac=INT64, last=INT64,
       fenced=st.booleans())
def test_large_answers_are_encoded_as_protobuf_encodes_them_and_decoded_in_place(status, message, entries, lac,
                                                                                  last, fenced):
    encoded = read_response(status, message, entries, lac, last, fenced)
    expected = message_of(status, message, entries, lac, last, fenced).SerializeToString()
    assert isinstance(encoded, EncodedReadResponse)
    assert serialize_read_response(encoded) == expected
    assert encoded.status == status and returned_bytes(encoded) == sum(len(body) for _, body in entries)
    pieces, size = read_response_pieces(encoded)  # what the framed port sends: the bodies themselves, not copies
    assert b"".join(pieces) == expected and size == len(expected)
    assert all(any(piece is body for piece in pieces) for _, body in entries)
    decoded = decode_read_response(expected)
    assert isinstance(decoded, WireReadResponse)
    for entry in decoded.entries:  # the bodies are the received bytes themselves, read-only
        assert isinstance(entry.body, memoryview) and entry.body.obj is expected and entry.body.readonly
    assert answer(expected) == protobuf_answer(expected)


def test_answers_with_a_small_entry_or_none_stay_protobuf_messages():
    small = read_response(pb.OK, "", [(0, b"x" * LARGE), (1, b"s" * 100)], 1, 1, False)
    empty = read_response(pb.NO_SUCH_ENTRY, "no entry 3", [], -1, 2, True)
    for response in (small, empty):
        assert isinstance(response, pb.ReadResponse)
        assert serialize_read_response(response) == response.SerializeToString()
        assert read_response_pieces(response) == ([response.SerializeToString()], response.ByteSize())
    assert returned_bytes(small) == LARGE + 100 and returned_bytes(empty) == 0
    assert isinstance(decode_read_response(small.SerializeToString()), pb.ReadResponse)


def length_delimited(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + varint(len(payload)) + payload


ENTRY = length_delimited(0x1A, b"\x08\x05" + length_delimited(0x12, b"x" * LARGE))
TAIL = b"\x20\x04\x28\x05"
UNUSUAL = {
    "a small entry among large ones": ENTRY + length_delimited(0x1A, b"\x08\x06" + length_delimited(0x12, b"s")),
    "fields out of order": TAIL + ENTRY,
    "entries after a later field": ENTRY + TAIL + ENTRY,
    "a repeated scalar (the last one counts)": ENTRY + b"\x20\x04\x20\x07",
    "an unknown field": ENTRY + b"\x38\x01",
    "an unknown field in an entry": length_delimited(0x1A, b"\x18\x01" + length_delimited(0x12, b"x" * LARGE)),
    "an entry's fields out of order": length_delimited(0x1A, length_delimited(0x12, b"x" * LARGE) + b"\x08\x05"),
    "fenced as 2 (true for protobuf)": ENTRY + b"\x30\x02",
    "a negative status": b"\x08" + varint(2**64 - 1) + ENTRY,
    "a status of the wrong wire type": b"\x0d\x00\x00\x00\x00" + ENTRY,
    "no entries": b"\x08\x03" + length_delimited(0x12, b"m" * LARGE),
}


@pytest.mark.parametrize("name", sorted(UNUSUAL))
def test_anything_but_the_canonical_encoding_of_large_entries_is_decoded_by_protobuf(name):
    raw = UNUSUAL[name]
    assert isinstance(decode_read_response(raw), pb.ReadResponse)
    assert answer(raw) == protobuf_answer(raw)


@pytest.mark.parametrize("raw", [
    b"\xff\xff\xff\xff\x0f not protobuf" + b"\x00" * LARGE_ENTRY_BYTES,
    ENTRY[:-1],  # truncated in the body
    b"\x1a" + varint(len(ENTRY) + 10) + ENTRY[1:],  # an entry longer than the answer
    b"\x1a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" + ENTRY,  # a length of more than 64 bits
    length_delimited(0x12, b"\xff" * 10) + ENTRY,  # a message that is not UTF-8
])
def test_what_protobuf_cannot_decode_fails_as_protobuf_fails(raw):
    with pytest.raises(DecodeError):
        pb.ReadResponse.FromString(raw)
    with pytest.raises(DecodeError):
        decode_read_response(raw)


def test_the_bookie_registers_the_read_answers_serializer():
    from tests.bookie.test_add_wire import Servicer, _Server

    from bookie_server.add_wire import register_bookie_service
    server = _Server()
    register_bookie_service(Servicer(), server)
    handlers = server.registered[pb.DESCRIPTOR.services_by_name["Bookie"].full_name]
    assert handlers["Read"].response_serializer is serialize_read_response
    assert handlers["Read"].request_deserializer == pb.ReadRequest.FromString
