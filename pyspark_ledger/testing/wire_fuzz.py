"""Hypothesis strategies and raw gRPC access for fuzzing a real bookie over its wire protocol.

Three kinds of input:

* valid messages with hostile values (``add_requests``, ``add_batches``,
  ``read_requests``, ``read_lac_requests``, ``write_lac_requests``): ids at
  and past every boundary, empty and huge master keys, entry bodies whose
  header is valid but names other ids, bodies with a bad digest, truncated
  headers, reversed and enormous read ranges, long-poll timeouts;
* mutated messages (``mutated``): a valid message serialized, then bit flips,
  truncation, inserted or deleted bytes, or two messages concatenated (which
  protobuf merges);
* raw garbage bytes (``garbage``).

``RawBookie`` sends any of them as raw bytes (identity serializers), so the
bookie's own parser sees exactly what was generated; it also reads the
standard gRPC health service. ``rss_bytes`` reads a process's resident set
from /proc. Nothing here decides what a correct answer is: the fuzz tests do.

This module imports hypothesis (a test dependency: ``pip install '.[test]'``);
nothing outside tests imports it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import strategies as st

from pyspark_ledger.entry import HEADER_SIZE, MAGIC, EntryCodec, master_key
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

SERVICE = "pyspark_ledger.wire.v1.Bookie"
UNARY_METHODS = ("Read", "ReadLac", "WriteLac", "Info")
STREAM_METHOD = "AddStream"
METHODS = (STREAM_METHOD, *UNARY_METHODS)
#: the request type of each method (mutated messages of one type are also sent to the others)
REQUEST_TYPES = {"AddStream": pb.AddBatch, "Read": pb.ReadRequest, "ReadLac": pb.ReadLacRequest,
                 "WriteLac": pb.WriteLacRequest, "Info": pb.BookieInfoRequest}
#: a client channel that accepts whatever the bookie may send (a range read answers up to 16 MiB)
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 256 * 1024 * 1024),
                   ("grpc.max_send_message_length", 256 * 1024 * 1024)]

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
I64_MAX = 2**63 - 1
I64_MIN = -(2**63)
#: ledger ids a fuzz test leaves to the metadata store (it counts from 0)
RESERVED_LEDGER_IDS = 1000
#: ledger ids at the edges of the uint64 field
EDGE_LEDGER_IDS = (0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**53 + 1, 2**62, I64_MAX, 2**63, U64_MAX - 1,
                   U64_MAX)
#: entry ids at the edges of the int64 field, including the ones that once poisoned a bookie (2^40, 2^62)
EDGE_ENTRY_IDS = (I64_MIN, -2, -1, 0, 1, 2, 1023, 1024, 2**20, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40,
                  2**48, 2**53 + 1, 2**62, I64_MAX - 1, I64_MAX)
#: long-poll timeouts (uint32 milliseconds)
EDGE_TIMEOUTS_MS = (0, 1, 10, 100, 999, 1000, 60_000, 60_001, 2**31 - 1, 2**32 - 1)
#: max_bytes of a range read (uint64)
EDGE_MAX_BYTES = (0, 1, 35, 36, 40, 4096, 16 * 1024 * 1024, 16 * 1024 * 1024 + 1, 2**32, I64_MAX, U64_MAX)
EDGE_ENTRY_STEPS = (0, 1, 2, 3, 5, 65_536, 65_537, U32_MAX)


def edge_or_any(edges: Sequence[int], low: int, high: int) -> st.SearchStrategy[int]:
    """Mostly boundary values, sometimes any value of the field's range, sometimes a neighbour of an edge."""
    near = st.sampled_from(edges).flatmap(
        lambda edge: st.integers(max(low, edge - 3), min(high, edge + 3)))
    return st.one_of(st.sampled_from(edges), near, st.integers(low, high))


def ledger_ids(reserved_below: int = RESERVED_LEDGER_IDS, base: int = 1_000_000) -> st.SearchStrategy[int]:
    """Hostile ledger ids, plus ordinary ones from ``base`` on. Ids below ``reserved_below`` are left out:
    a metadata store hands those out (from 0 on), and a fuzzed add or fence there would squat on the next
    legitimate ledger (squatting has its own test; ledgers holding data are targeted explicitly, with a
    wrong key)."""
    ids = st.one_of(edge_or_any(EDGE_LEDGER_IDS, 0, U64_MAX), st.integers(base, base + 64))
    return ids.filter(lambda value: value >= reserved_below)


def entry_ids() -> st.SearchStrategy[int]:
    return st.one_of(edge_or_any(EDGE_ENTRY_IDS, I64_MIN, I64_MAX), st.integers(0, 64))


def master_keys(huge: int = 2 * 1024 * 1024) -> st.SearchStrategy[bytes]:
    """Empty, short, the usual 32 bytes, long, and (rarely) ``huge`` bytes."""
    return st.one_of(
        st.just(b""),
        st.binary(min_size=1, max_size=64),
        st.builds(master_key, st.binary(max_size=8)),
        st.integers(1024, 65536).map(lambda size: b"K" * size),
        st.just(b"H" * huge),
    )


@dataclass(frozen=True)
class BodyPlan:
    """How an entry body was built (kept for the report of a failure)."""

    kind: str
    header_ledger_id: int
    header_entry_id: int


_CODEC = EntryCodec()
_HMAC = EntryCodec("hmac-sha256", b"pw")


def _fit_i64(value: int) -> int:
    return max(I64_MIN, min(I64_MAX, value))


def _fit_u64(value: int) -> int:
    return max(0, min(U64_MAX, value))


@st.composite
def entry_bodies(draw, ledger_id: int, entry_id: int, max_entry_size: int) -> tuple[bytes, BodyPlan]:
    """An entry body for an add of (ledger_id, entry_id): valid, or valid but hostile, or broken."""
    kind = draw(st.sampled_from(("valid", "valid", "valid-hmac", "other-ids", "hostile-lac", "bad-digest",
                                 "bad-magic", "short-header", "header-only", "empty", "garbage", "oversize",
                                 "large")))
    payload = draw(st.binary(max_size=256))
    lac = draw(st.one_of(st.just(_fit_i64(entry_id - 1)), edge_or_any(EDGE_ENTRY_IDS, I64_MIN, I64_MAX)))
    length = draw(st.one_of(st.just(len(payload)), st.sampled_from((0, U64_MAX, I64_MAX))))
    head_ledger, head_entry = ledger_id, _fit_i64(entry_id)
    codec = _HMAC if kind == "valid-hmac" else _CODEC
    if kind == "other-ids":
        head_ledger = draw(edge_or_any(EDGE_LEDGER_IDS, 0, U64_MAX))
        head_entry = draw(entry_ids())
    if kind == "large":
        payload = b"L" * draw(st.integers(64 * 1024, 1024 * 1024))
    if kind in ("valid", "valid-hmac", "other-ids", "large"):
        body = codec.encode(head_ledger, head_entry, _fit_i64(entry_id - 1), len(payload), payload)
    elif kind == "hostile-lac":
        body = codec.encode(head_ledger, head_entry, lac, _fit_u64(length), payload)
    elif kind == "bad-digest":
        body = bytearray(codec.encode(head_ledger, head_entry, _fit_i64(entry_id - 1), len(payload), payload))
        position = HEADER_SIZE + draw(st.integers(0, 3))
        body[position] ^= draw(st.integers(1, 255))
        body = bytes(body)
    elif kind == "bad-magic":
        body = draw(st.binary(min_size=2, max_size=2).filter(lambda magic: magic != MAGIC)) + \
            codec.encode(head_ledger, head_entry, entry_id - 1 if entry_id > I64_MIN else entry_id, 0, payload)[2:]
    elif kind == "short-header":
        body = codec.encode(head_ledger, head_entry, 0, 0, b"")[:draw(st.integers(0, HEADER_SIZE - 1))]
    elif kind == "header-only":
        body = codec.encode(head_ledger, head_entry, 0, 0, b"")[:HEADER_SIZE + draw(st.integers(0, 3))]
    elif kind == "empty":
        body = b""
    elif kind == "garbage":
        body = draw(st.binary(max_size=512))
    else:  # oversize: one byte over the bookie's limit
        body = b"O" * (max_entry_size + 1)
    return body, BodyPlan(kind, head_ledger, head_entry)


@st.composite
def add_requests(draw, max_entry_size: int,
                 seed_keys: dict[int, bytes] | None = None) -> tuple[pb.AddRequest, BodyPlan]:
    """One AddRequest with hostile values. With ``seed_keys`` ({ledger id: its real key}) it sometimes aims
    at a ledger holding data, always with another key."""
    seed_keys = seed_keys or {}
    targets = ledger_ids()
    if seed_keys:
        targets = st.one_of(targets, st.sampled_from(sorted(seed_keys)))
    ledger_id = draw(targets)
    entry_id = draw(entry_ids())
    key = draw(master_keys(huge=max_entry_size // 2))
    if ledger_id in seed_keys and key == seed_keys[ledger_id]:
        key = key[::-1] + b"x"
    body, plan = draw(entry_bodies(ledger_id, entry_id, max_entry_size))
    return pb.AddRequest(ledger_id=ledger_id, entry_id=entry_id, master_key=key, body=body,
                         recovery=draw(st.booleans())), plan


def tiny_add_batch(count: int, ledger_id: int, key: bytes, ledgers: int = 1) -> pb.AddBatch:
    """``count`` valid adds of empty payloads in one AddBatch (the memory amplification case), spread over
    ``ledgers`` ledgers from ``ledger_id`` on (entry ids 0, 1, ... in each)."""
    adds = []
    for index in range(count):
        ledger, entry_id = ledger_id + index % ledgers, index // ledgers
        adds.append(pb.AddRequest(ledger_id=ledger, entry_id=entry_id, master_key=key,
                                  body=_CODEC.encode(ledger, entry_id, entry_id - 1, 0, b"")))
    return pb.AddBatch(adds=adds)


def read_requests(seed_ledgers: Sequence[int] = ()
                  ) -> st.SearchStrategy[pb.ReadRequest]:
    """Reads with hostile ranges (reversed, negative, enormous), entry steps, max_bytes, fence flags and keys."""
    targets = ledger_ids()
    if seed_ledgers:
        targets = st.one_of(targets, st.sampled_from(sorted(seed_ledgers)))

    @st.composite
    def build(draw) -> pb.ReadRequest:
        first = draw(entry_ids())
        last = draw(st.one_of(entry_ids(), st.just(first), st.integers(0, 64).map(lambda n: _fit_i64(first + n)),
                              st.just(I64_MAX)))
        return pb.ReadRequest(ledger_id=draw(targets), first_entry_id=first, last_entry_id=last,
                              fence=draw(st.booleans()), recovery=draw(st.booleans()),
                              master_key=draw(master_keys(huge=1024 * 1024)),
                              max_bytes=draw(edge_or_any(EDGE_MAX_BYTES, 0, U64_MAX)),
                              entry_step=draw(edge_or_any(EDGE_ENTRY_STEPS, 0, U32_MAX)))
    return build()


def read_lac_requests(seed_ledgers: Sequence[int] = ()
                      ) -> st.SearchStrategy[pb.ReadLacRequest]:
    targets = ledger_ids()
    if seed_ledgers:
        targets = st.one_of(targets, st.sampled_from(sorted(seed_ledgers)))
    return st.builds(pb.ReadLacRequest, ledger_id=targets, has_previous=st.booleans(),
                     previous_lac=entry_ids(), timeout_ms=edge_or_any(EDGE_TIMEOUTS_MS, 0, 2**32 - 1),
                     master_key=master_keys(huge=1024 * 1024))


def write_lac_requests(seed_keys: dict[int, bytes] | None = None
                       ) -> st.SearchStrategy[pb.WriteLacRequest]:
    """Explicit LACs of any value; aimed at seed ledgers only with a wrong key."""
    seed_keys = seed_keys or {}
    targets = ledger_ids()
    if seed_keys:
        targets = st.one_of(targets, st.sampled_from(sorted(seed_keys)))

    @st.composite
    def build(draw) -> pb.WriteLacRequest:
        ledger_id = draw(targets)
        key = draw(master_keys(huge=1024 * 1024))
        if ledger_id in seed_keys and key == seed_keys[ledger_id]:
            key = key + b"x"
        return pb.WriteLacRequest(ledger_id=ledger_id, master_key=key, last_add_confirmed=draw(entry_ids()))
    return build()


# --- mutation and garbage --------------------------------------------------------------
@st.composite
def mutated(draw, data: bytes) -> tuple[str, bytes]:
    """``data`` damaged one way: (how, bytes)."""
    how = draw(st.sampled_from(("bit-flips", "truncate", "insert", "delete", "duplicate", "splice-garbage",
                                "set-byte")))
    buffer = bytearray(data)
    if how == "bit-flips" and buffer:
        for _ in range(draw(st.integers(1, 8))):
            position = draw(st.integers(0, len(buffer) - 1))
            buffer[position] ^= 1 << draw(st.integers(0, 7))
    elif how == "truncate":
        del buffer[draw(st.integers(0, len(buffer))):]
    elif how == "insert":
        position = draw(st.integers(0, len(buffer)))
        buffer[position:position] = draw(st.binary(min_size=1, max_size=16))
    elif how == "delete" and buffer:
        start = draw(st.integers(0, len(buffer) - 1))
        del buffer[start:start + draw(st.integers(1, 16))]
    elif how == "duplicate":
        buffer.extend(bytes(buffer))  # protobuf merges the copies: repeated fields double
    elif how == "splice-garbage" and buffer:
        start = draw(st.integers(0, len(buffer) - 1))
        garbage = draw(st.binary(min_size=1, max_size=32))
        buffer[start:start + len(garbage)] = garbage
    elif how == "set-byte" and buffer:
        buffer[draw(st.integers(0, len(buffer) - 1))] = draw(st.sampled_from((0x00, 0x7F, 0x80, 0xFF)))
    return how, bytes(buffer)


def garbage() -> st.SearchStrategy[bytes]:
    """Random bytes, small mostly, with a few large and a few protobuf-looking ones (tag bytes, varints)."""
    varint_bomb = st.integers(1, 12).map(lambda n: b"\x0a" + b"\xff" * n + b"\x01")
    deep_length = st.integers(1, 2**31).map(lambda n: b"\x0a" + _varint(n))
    return st.one_of(st.binary(max_size=64), st.binary(max_size=4096), varint_bomb, deep_length,
                     st.integers(64 * 1024, 2 * 1024 * 1024).map(lambda n: bytes([0x0A]) * n))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


# --- raw access to a bookie ---------------------------------------------------------------
def _identity(data: bytes) -> bytes:
    return data


class RawBookie:
    """A gRPC channel to one bookie that sends and receives raw bytes on every Bookie method.

    ``credentials`` (``grpc.ChannelCredentials``, e.g. ``ClientTls(...).channel_credentials()``) makes it a
    TLS channel, for bookies started with ``--tls-cert``; without them it is plaintext."""

    def __init__(self, address: str, credentials: grpc.ChannelCredentials | None = None) -> None:
        self.address = address
        self.channel = (grpc.secure_channel(address, credentials, options=CHANNEL_OPTIONS) if credentials is not None
                        else grpc.insecure_channel(address, options=CHANNEL_OPTIONS))
        self._unary: dict[str, Callable] = {
            name: self.channel.unary_unary(f"/{SERVICE}/{name}", request_serializer=_identity,
                                           response_deserializer=_identity) for name in UNARY_METHODS}
        self._stream = self.channel.stream_stream(f"/{SERVICE}/{STREAM_METHOD}", request_serializer=_identity,
                                                  response_deserializer=_identity)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    def unary(self, method: str, data: bytes, timeout: float) -> bytes:
        """One call; raises grpc.RpcError on a transport status."""
        return self._unary[method](data, timeout=timeout)

    def stream(self, messages: Sequence[bytes], timeout: float) -> list[bytes]:
        """An AddStream call: send ``messages``, half-close, collect every answer; raises grpc.RpcError."""
        return list(self._stream(iter(messages), timeout=timeout))

    def open_stream(self, requests: Iterable[bytes], timeout: float):
        """An AddStream call left to the caller (its iterator of answers; cancel() it when done)."""
        return self._stream(iter(requests), timeout=timeout)

    def call(self, method: str, messages: Sequence[bytes], timeout: float) -> list[bytes]:
        if method == STREAM_METHOD:
            return self.stream(messages, timeout)
        return [self.unary(method, messages[0] if messages else b"", timeout)]

    def health(self, timeout: float = 5.0) -> str:
        """The health status name of the Bookie service (SERVING, NOT_SERVING...)."""
        reply = self._health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

    def info(self, timeout: float = 5.0) -> pb.BookieInfoResponse:
        return pb.BookieInfoResponse.FromString(self.unary("Info", b"", timeout))

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "RawBookie":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid`` (Linux /proc), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return 0


def describe(message, limit: int = 300) -> str:
    """A one-line description of a protobuf message for a report (long bytes fields shortened)."""
    parts = []
    for field, value in message.ListFields():
        if isinstance(value, bytes):
            shown = repr(value[:24]) + (f"...({len(value)} bytes)" if len(value) > 24 else "")
        elif isinstance(value, Sequence) and not isinstance(value, str):  # a repeated field
            shown = f"[{len(value)} items: " + ", ".join(describe(item, 200) for item in value[:3]) + \
                (", ...]" if len(value) > 3 else "]")
        else:
            shown = repr(value)
        parts.append(f"{field.name}={shown}")
    text = f"{type(message).__name__}({', '.join(parts)})"
    return text if len(text) <= limit else text[:limit] + "..."
