"""Protobuf's base-128 varints, decoded and encoded by hand where the bookie and the client parse or build a message
without protobuf's objects and copies (``bookie_server.add_wire`` and ``read_wire``, ``pyspark_ledger.client.add_wire``
and ``read_wire``, ``ack_runs``)."""
from __future__ import annotations

UINT64 = 2**64
_INT64_SIGN = 2**63
_ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))


def encode_varint(value: int) -> bytes:
    """The base-128 varint of a value in 0..2**64-1 (an int64 field's negative value: ``value % UINT64``)."""
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x200000:  # entry ids of a long ledger: the writer's hot path
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, value >> 14))
    if value < 0x10000000:
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, (value >> 14) & 0x7F | 0x80, value >> 21))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
