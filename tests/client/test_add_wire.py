"""Adds encoded once per entry: byte for byte what protobuf serializes, and batches are concatenations."""
from __future__ import annotations

import pytest

from pyspark_ledger.client.add_wire import AddEncoder, encode_add, varint
from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

CASES = [
    (0, 0, b"", b"", False),
    (1, 0, b"k", b"", True),
    (7, 1, b"k" * 20, b"x" * 127, False),
    (300, 127, b"q", b"w" * 128, True),
    (2**32, 16383, b"q" * 255, b"w" * 16384, False),
    (2**64 - 1, 2**63 - 1, b"key", b"z" * (1 << 20), True),
    (5, -1, b"key", b"body", False),
    (5, -2**63, b"key", b"body", False),
]


@pytest.mark.parametrize("ledger_id, entry_id, key, body, recovery", CASES)
def test_encoded_add_is_what_protobuf_serializes(ledger_id, entry_id, key, body, recovery):
    expected = pb.AddBatch(adds=[pb.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=key, body=body,
                                               recovery=recovery)]).SerializeToString()
    assert encode_add(ledger_id, entry_id, key, body, recovery) == expected
    assert AddEncoder(ledger_id, key).encode(entry_id, body, recovery) == expected
    for cut in {0, len(body) // 3, len(body)}:  # the body given as head + payload: the same bytes
        assert AddEncoder(ledger_id, key).encode_pieces(entry_id, body[:cut], body[cut:], recovery) == expected


def test_one_encoder_reusing_its_size_fields_writes_what_protobuf_serializes():
    """The fields kept per body size must fit every entry id length, the recovery flag, and survive being
    dropped once more sizes than the encoder keeps were seen."""
    for ledger_id, key in ((7, b"key"), (0, b"")):  # a ledger id and key at their default are left out
        encoder = AddEncoder(ledger_id, key)
        for size in [1000] * 3 + list(range(90)) + [1000, 0]:
            # 16,384 .. 2**21 - 1: the ids whose varint encode_pieces makes inline
            for entry_id in (0, 1, 127, 128, 16383, 16384, 130_000, 2**21 - 1, 2**21, 2**35, -1):
                for recovery in (False, True):
                    body = bytes([size % 251]) * size
                    expected = pb.AddBatch(adds=[pb.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=key,
                                                               body=body, recovery=recovery)]).SerializeToString()
                    assert encoder.encode_pieces(entry_id, body[:36], body[36:], recovery) == expected


def test_a_batch_is_the_concatenation_of_its_adds():
    encoder = AddEncoder(42, b"secret")
    adds = [(entry_id, b"entry %d" % entry_id * entry_id) for entry_id in range(20)]
    batch = pb.AddBatch.FromString(b"".join(encoder.encode(entry_id, body) for entry_id, body in adds))
    assert [(add.ledger_id, add.entry_id, add.master_key, add.body, add.recovery) for add in batch.adds] == \
        [(42, entry_id, b"secret", body, False) for entry_id, body in adds]


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**63,
                                   2**64 - 1])
def test_varint_round_trips_through_protobuf(value):
    parsed = pb.AddRequest.FromString(b"\x08" + varint(value))
    assert parsed.ledger_id == value


def test_varint_is_protobufs_encoding_at_every_length():
    """Each fast path (1 to 4 bytes) and the general loop give the bytes protobuf writes."""
    values = [bits and (1 << bits) + offset for bits in range(0, 64) for offset in (-1, 0, 1)]
    for value in (v for v in values if 0 < v < 2**64):  # (protobuf leaves a 0 out)
        assert varint(value) == pb.AddRequest(ledger_id=value).SerializeToString()[1:], value


@pytest.mark.parametrize("ledger_id, entry_id, key, body, match", [
    (-1, 0, b"k", b"", "out of range"),
    (2**64, 0, b"k", b"", "out of range"),
    (1, 2**63, b"k", b"", "out of range"),
    (True, 0, b"k", b"", "out of range"),
    (1, 0, "k", b"", "bytes"),
    (1, 0, b"k", bytearray(b"x"), "bytes"),
])
def test_what_the_wire_cannot_carry_is_refused(ledger_id, entry_id, key, body, match):
    with pytest.raises(InvalidArgumentError, match=match):
        encode_add(ledger_id, entry_id, key, body)
