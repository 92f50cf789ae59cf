"""The bookie's AddBatch decoder (bookie_server/add_wire.py): large bodies decoded in place, never copied, and
the same adds as protobuf's decoder for every batch, in place or not."""
from __future__ import annotations

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from bookie_server.add_wire import LARGE_ADD_BYTES, decode_add_batch, register_bookie_service
from pyspark_ledger.client.add_wire import AddEncoder, varint
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

KEY = b"k" * 32
LARGE = LARGE_ADD_BYTES + 100


def fields(add) -> tuple:
    return add.ledger_id, add.entry_id, bytes(add.master_key), bytes(add.body), add.recovery


def protobuf_adds(raw: bytes) -> list[tuple]:
    return [fields(add) for add in pb.AddBatch.FromString(raw).adds]


def length_delimited(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + varint(len(payload)) + payload


def batch_of(*adds: bytes) -> bytes:
    return b"".join(length_delimited(0x0A, add) for add in adds)


add_requests = st.builds(
    pb.AddRequest,
    ledger_id=st.one_of(st.just(0), st.just(2**64 - 1), st.integers(0, 2**64 - 1)),
    entry_id=st.one_of(st.just(0), st.just(-1), st.just(2**63 - 1), st.just(-2**63), st.integers(-2**63, 2**63 - 1)),
    master_key=st.binary(max_size=64),
    body=st.integers(LARGE_ADD_BYTES, 3 * LARGE_ADD_BYTES).map(lambda n: bytes([n % 251]) * n),
    recovery=st.booleans())


@settings(max_examples=60, deadline=None)
@given(st.lists(add_requests, min_size=1, max_size=4))
def test_batches_of_large_adds_decode_in_place_as_protobuf_decodes_them(requests):
    raw = pb.AddBatch(adds=requests).SerializeToString()
    batch = decode_add_batch(raw)
    assert batch.in_place and batch.nbytes == len(raw)
    assert [fields(add) for add in batch.adds] == protobuf_adds(raw)
    for add in batch.adds:  # the bodies are the received bytes themselves, not copies
        assert isinstance(add.body, memoryview) and add.body.obj is raw
        assert type(add.master_key) is bytes


def test_the_clients_encoding_decodes_in_place():
    encoder = AddEncoder(2**64 - 1, KEY)
    bodies = [b"a" * (1024 * 1024), b"b" * LARGE]
    raw = encoder.encode(0, bodies[0]) + encoder.encode(2**63 - 1, bodies[1], recovery=True)
    batch = decode_add_batch(raw)
    assert batch.in_place
    assert [fields(add) for add in batch.adds] == [(2**64 - 1, 0, KEY, bodies[0], False),
                                                   (2**64 - 1, 2**63 - 1, KEY, bodies[1], True)]


BODY = b"x" * LARGE
CANONICAL = b"\x08\x07\x10\x05" + length_delimited(0x1A, KEY) + length_delimited(0x22, BODY)
UNUSUAL = {
    "a small add among large ones": batch_of(CANONICAL, b"\x08\x07\x10\x06" + length_delimited(0x22, b"s" * 100)),
    "fields out of order": batch_of(length_delimited(0x22, BODY) + b"\x08\x07\x10\x05" + length_delimited(0x1A, KEY)),
    "a repeated body (the last one counts)": batch_of(CANONICAL + length_delimited(0x22, b"y" * LARGE)),
    "a repeated ledger id": batch_of(b"\x08\x07\x08\x09" + length_delimited(0x22, BODY)),
    "an unknown field": batch_of(CANONICAL + b"\x30\x01"),
    "an unknown field between known ones": batch_of(b"\x08\x07\x18\x01" + length_delimited(0x22, BODY)),
    "an unknown batch field": batch_of(CANONICAL) + b"\x10\x01",
    "recovery as 2 (true for protobuf)": batch_of(CANONICAL + b"\x28\x02"),
    "no body": batch_of(b"\x08\x07" + length_delimited(0x1A, b"k" * LARGE)),
    "a ledger id of the wrong wire type": batch_of(b"\x09" + b"\x00" * 8 + length_delimited(0x22, BODY)),
}


@pytest.mark.parametrize("name", sorted(UNUSUAL))
def test_anything_but_the_canonical_encoding_of_large_adds_is_decoded_by_protobuf(name):
    raw = UNUSUAL[name]
    batch = decode_add_batch(raw)
    assert not batch.in_place and batch.nbytes == len(raw)
    assert [fields(add) for add in batch.adds] == protobuf_adds(raw)


def test_small_batches_are_decoded_by_protobuf():
    raw = b"".join(AddEncoder(3, KEY).encode(e, b"z" * 1000) for e in range(100))
    batch = decode_add_batch(raw)
    assert not batch.in_place and len(batch.adds) == 100 and batch.nbytes == len(raw)


@pytest.mark.parametrize("raw", [
    b"\xff\xff\xff\xff\x0f not protobuf" + b"\x00" * LARGE,
    batch_of(CANONICAL)[:-1],  # truncated in the body
    b"\x0a" + varint(len(CANONICAL) + 10) + CANONICAL,  # an add longer than the batch
    b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" + CANONICAL,  # a length of more than 64 bits
])
def test_what_protobuf_cannot_decode_fails_as_protobuf_fails(raw):
    with pytest.raises(DecodeError):
        pb.AddBatch.FromString(raw)
    with pytest.raises(DecodeError):
        decode_add_batch(raw)


class Servicer:
    def AddStream(self, request_iterator, context): ...
    def Read(self, request, context): ...
    def ReadLac(self, request, context): ...
    def WriteLac(self, request, context): ...
    def Info(self, request, context): ...


class _Server:
    """Takes what ``register_bookie_service`` registers."""

    def __init__(self) -> None:
        self.generic: tuple = ()
        self.registered: dict = {}

    def add_generic_rpc_handlers(self, handlers) -> None:
        self.generic = handlers

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.registered[service] = handlers


def test_every_method_of_the_service_is_registered_and_addstream_takes_raw_batches():
    server = _Server()
    register_bookie_service(Servicer(), server)
    service = pb.DESCRIPTOR.services_by_name["Bookie"]
    handlers = server.registered[service.full_name]
    assert set(handlers) == {method.name for method in service.methods}
    assert handlers["AddStream"].request_deserializer is decode_add_batch
    assert handlers["AddStream"].request_streaming and handlers["AddStream"].response_streaming
    assert handlers["Read"].request_deserializer == pb.ReadRequest.FromString
    (generic,) = server.generic
    details = type("Details", (), {"method": f"/{service.full_name}/AddStream"})()
    assert isinstance(generic, grpc.GenericRpcHandler)
    assert generic.service(details).request_deserializer is decode_add_batch
