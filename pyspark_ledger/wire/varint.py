"""Protobuf's base-128 varints, decoded by hand where the bookie and the client parse a message without
protobuf's copies (``bookie_server.add_wire``, ``pyspark_ledger.client.read_wire``)."""
from __future__ import annotations

UINT64 = 2**64
_INT64_SIGN = 2**63


def decode_varint(raw: bytes, position: int) -> tuple[int, int]:
    """A base-128 varint of at most 64 bits at ``position``: (value, position after it); (-1, -1) if it is
    truncated, longer than ten bytes or over 64 bits."""
    value = shift = 0
    end = min(len(raw), position + 10)
    while position < end:
        byte = raw[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value, position) if value < UINT64 else (-1, -1)
        shift += 7
    return -1, -1


def as_int64(value: int) -> int:
    """An int64 field's value from its varint (negatives are two's complement in ten bytes)."""
    return value - UINT64 if value >= _INT64_SIGN else value
