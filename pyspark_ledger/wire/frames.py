"""Frames of the framed port (docs/protocol.md W11, W12): adds, range reads and their answers over TCP, without gRPC.

The codec the bookie's framed port (``bookie_server.framed_listener``) and the client's framed add stream share:
gRPC is four fifths of a paced add's transport CPU (docs/measurements.md, "What the transport costs a paced
add"). It is pure: bytes in, frames or a problem out; sockets and threads belong to its users.

A frame is a 5-byte header -- the length of what follows it (4 bytes, big-endian; the kind byte included) and
the kind (1 byte) -- then the payload:

* ``HELLO`` (client, first and once): ``MAGIC``, the highest version the client speaks (2 bytes), its flags
  (2 bytes; ``ANSWER_RUNS``: OK answers as runs, docs/protocol.md W9; ``READS``: a read connection, W12);
* ``WELCOME`` (bookie, the answer to HELLO): the version both will speak, the flags it grants (those asked that
  it knows), and its bookie id (1 byte of length, then UTF-8);
* ``ADDS`` (client): an ``AddBatch`` message, encoded as on the gRPC stream;
* ``ANSWERS`` (bookie): an ``AddResultBatch`` message;
* ``READ`` (client, on a read connection): a request id (4 bytes) and a ``ReadRequest`` message, at most
  ``MAX_READ_REQUEST_BYTES`` in all;
* ``READ_ANSWER`` (bookie, on a read connection): the request's id (4 bytes) and its ``ReadResponse`` message;
* ``END`` (either side, last): a status (2 bytes: a ``bookie.proto`` status, ``OK`` for a plain end) and a
  UTF-8 message of at most ``MAX_END_MESSAGE_BYTES`` saying why.

Every length is checked before anything is buffered: a ``FrameReader`` refuses a frame longer than the limit its
owner gives (the bookie: its largest AddBatch; the client: its largest answer), an unknown kind, and a kind the
other side may not send at that point (``ServerRules``, ``ClientRules``), each with a ``ValueError`` whose
message names the limit or the rule; its owner ends the stream with it.
"""
from __future__ import annotations

import enum
import struct
from typing import Callable

MAGIC = b"LDGRADDS"
VERSION = 1
HEADER = struct.Struct("!IB")  # length of kind + payload, kind
_HELLO = struct.Struct("!8sHH")
_WELCOME = struct.Struct("!HHB")
_END = struct.Struct("!H")
ANSWER_RUNS = 0x0001
READS = 0x0002  # the connection reads (READ frames) instead of adding (docs/protocol.md W12)
KNOWN_FLAGS = ANSWER_RUNS | READS
ADD_FLAGS = ANSWER_RUNS  # what a HELLO asks by default: an add stream with answers as runs
REQUEST_ID = struct.Struct("!I")
MAX_READ_REQUEST_BYTES = 1024  # a READ's payload: its id and a ReadRequest (ids, a key: well under 200 bytes)
MAX_BOOKIE_ID_BYTES = 255
MAX_END_MESSAGE_BYTES = 1024
MAX_CONTROL_BYTES = _END.size + MAX_END_MESSAGE_BYTES  # the longest HELLO, WELCOME or END payload (an END's)
HANDSHAKE_TIMEOUT_S = 10.0  # from a connection's start: its TLS handshake (if any) and its HELLO, together


class Kind(enum.IntEnum):
    HELLO = 1
    WELCOME = 2
    ADDS = 3
    ANSWERS = 4
    END = 5
    READ = 6
    READ_ANSWER = 7


def header(kind: Kind, payload_size: int) -> bytes:
    """The header of a frame whose payload has ``payload_size`` bytes (sent before the payload, which need not be
    joined to it)."""
    if not 0 <= payload_size <= 2**32 - 2:
        raise ValueError(f"a frame's payload holds 0 to {2**32 - 2} bytes, not {payload_size}")
    return HEADER.pack(payload_size + 1, kind)


def frame(kind: Kind, payload: bytes = b"") -> bytes:
    return header(kind, len(payload)) + payload


def hello(version: int = VERSION, flags: int = ADD_FLAGS) -> bytes:
    return frame(Kind.HELLO, _HELLO.pack(MAGIC, version, flags))


def welcome(version: int, flags: int, bookie_id: str) -> bytes:
    name = bookie_id.encode()
    if len(name) > MAX_BOOKIE_ID_BYTES:
        raise ValueError(f"a bookie id in WELCOME holds at most {MAX_BOOKIE_ID_BYTES} bytes, not {len(name)}")
    return frame(Kind.WELCOME, _WELCOME.pack(version, flags, len(name)) + name)


def end(status: int, message: str = "") -> bytes:
    """An END frame; a message longer than ``MAX_END_MESSAGE_BYTES`` is cut (at a character boundary)."""
    text = message.encode()[:MAX_END_MESSAGE_BYTES].decode(errors="ignore").encode()
    return frame(Kind.END, _END.pack(status) + text)


def parse_hello(payload: bytes) -> tuple[int, int]:
    """(version, flags) of a HELLO payload; ValueError if it is not one."""
    if len(payload) != _HELLO.size:
        raise ValueError(f"a HELLO holds {_HELLO.size} bytes, not {len(payload)}")
    magic, version, flags = _HELLO.unpack(payload)
    if magic != MAGIC:
        raise ValueError("not a framed add stream: the HELLO does not start with its magic bytes")
    if version < 1:
        raise ValueError(f"a HELLO names version 1 or later, not {version}")
    return version, flags


def agree(version: int, flags: int, bookie_id: str) -> bytes:
    """The bookie's WELCOME to a HELLO of ``version`` and ``flags``: the lower of the two versions and the flags
    it knows of those asked."""
    return welcome(min(version, VERSION), flags & KNOWN_FLAGS, bookie_id)


def parse_welcome(payload: bytes, asked_flags: int) -> tuple[int, int, str]:
    """(version, flags, bookie id) of a WELCOME; ValueError if it is malformed, names a version this side does
    not speak, or grants a flag that was not asked."""
    if len(payload) < _WELCOME.size:
        raise ValueError(f"a WELCOME holds at least {_WELCOME.size} bytes, not {len(payload)}")
    version, flags, size = _WELCOME.unpack_from(payload)
    if not 1 <= version <= VERSION:
        raise ValueError(f"the bookie answered version {version}; this client speaks 1 to {VERSION}")
    if flags & ~asked_flags:
        raise ValueError(f"the bookie granted flags {flags:#06x}, beyond those asked ({asked_flags:#06x})")
    if len(payload) != _WELCOME.size + size:
        raise ValueError(f"a WELCOME's bookie id is {size} bytes, but {len(payload) - _WELCOME.size} follow")
    try:
        name = bytes(payload[_WELCOME.size:]).decode()
    except UnicodeDecodeError:
        raise ValueError("a WELCOME's bookie id is not UTF-8") from None
    return version, flags, name


def handshake_deadline(connected_at: float) -> float:
    """When a connection accepted at ``connected_at`` (a monotonic clock) must have finished its TLS handshake,
    if it has one, and sent its HELLO: one ``HANDSHAKE_TIMEOUT_S`` for both, so a silent peer holds its stream
    slot no longer over TLS than without."""
    return connected_at + HANDSHAKE_TIMEOUT_S


def welcome_problem(answered_as: str, meant: str) -> str | None:
    """What is wrong with a WELCOME naming bookie ``answered_as`` on a port the client dialed as bookie ``meant``
    (its registration named that port), or None: another bookie's answer means the registration is stale, and the
    stream must not go on there."""
    if answered_as == meant:
        return None
    return f"the port answered as bookie {answered_as!r}: is the registration stale?"


def parse_end(payload: bytes) -> tuple[int, str]:
    """(status, message) of an END; ValueError if it is malformed."""
    if not _END.size <= len(payload) <= _END.size + MAX_END_MESSAGE_BYTES:
        raise ValueError(f"an END holds {_END.size} to {_END.size + MAX_END_MESSAGE_BYTES} bytes, not {len(payload)}")
    (status,) = _END.unpack_from(payload)
    return status, bytes(payload[_END.size:]).decode(errors="replace")


def read_frame(request_id: int, request: bytes) -> bytes:
    """A READ frame: ``request`` (an encoded ``ReadRequest``) under ``request_id``; ValueError past the limits."""
    if not 0 <= request_id < 2**32:
        raise ValueError(f"a request id is 0 to {2**32 - 1}, not {request_id}")
    if REQUEST_ID.size + len(request) > MAX_READ_REQUEST_BYTES:
        raise ValueError(f"a READ frame holds at most {MAX_READ_REQUEST_BYTES} bytes, not "
                         f"{REQUEST_ID.size + len(request)}")
    return frame(Kind.READ, REQUEST_ID.pack(request_id) + request)


def read_answer_head(request_id: int, answer_size: int) -> bytes:
    """The header and request id of a READ_ANSWER frame whose ``ReadResponse`` is ``answer_size`` bytes (sent
    before the answer, which need not be joined to it)."""
    return header(Kind.READ_ANSWER, REQUEST_ID.size + answer_size) + REQUEST_ID.pack(request_id)


def split_request_id(payload) -> tuple[int, memoryview]:
    """(request id, the message after it) of a READ or READ_ANSWER payload; ValueError if it has no id."""
    if len(payload) < REQUEST_ID.size:
        raise ValueError(f"a READ or READ_ANSWER frame starts with a {REQUEST_ID.size}-byte request id; "
                         f"this one holds {len(payload)} bytes")
    view = memoryview(payload)
    return REQUEST_ID.unpack_from(view)[0], view[REQUEST_ID.size:]


class FrameReader:
    """Splits received bytes into frames: ``feed(data)`` returns the (kind, payload) of every frame completed.

    A frame whose declared length exceeds ``max_payload`` (control frames: ``MAX_CONTROL_BYTES``; READ frames:
    ``MAX_READ_REQUEST_BYTES``), or a length
    of 0, or an unknown kind, raises ValueError at once -- before its payload is waited for -- and so does
    every later ``feed`` (the stream is broken). Holds at most one incomplete frame."""

    __slots__ = ("max_payload", "_buffer", "_broken", "_limits")

    def __init__(self, max_payload: int) -> None:
        if max_payload < MAX_CONTROL_BYTES:
            raise ValueError(f"a frame reader takes payloads of at least {MAX_CONTROL_BYTES} bytes")
        self.max_payload = max_payload
        self._buffer = bytearray()
        self._broken: str | None = None
        # the largest header length of each kind (kind byte + payload); unknown kinds are absent
        self._limits = {int(kind): 1 + _limit_of(kind, max_payload) for kind in Kind}

    @property
    def pending(self) -> int:
        """Bytes received of a frame not yet complete."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[tuple[Kind, bytes]]:
        if self._broken is not None:
            raise ValueError(self._broken)
        buffer = self._buffer
        held = bool(buffer)
        if held:  # the rest of a frame begun earlier: parsed from the held bytes
            buffer += data
            source = memoryview(buffer)
        else:  # nothing held (nearly always): parsed where the bytes are, what is left of them kept
            source = memoryview(data)
        frames = []
        position = 0
        size = len(source)
        limits = self._limits
        try:
            while size - position >= 5:  # HEADER.size
                length, kind_byte = HEADER.unpack_from(source, position)
                if not 0 < length <= limits.get(kind_byte, 0):  # (the common case checked in one step)
                    problem = self._check(length, kind_byte)
                    self._broken = problem
                    self._buffer = bytearray()
                    raise ValueError(problem)
                end = position + 4 + length
                if end > size:
                    break
                frames.append((_KIND_OF[kind_byte], bytes(source[position + 5:end])))
                position = end
            rest = bytes(source[position:]) if not held and position < size else None
        finally:
            source.release()
        if rest is not None:
            buffer += rest
        elif held and position:
            del buffer[:position]
        return frames

    def narrowed(self, max_payload: int) -> "FrameReader":
        """A reader of data frames of at most ``max_payload`` bytes that holds what this one holds (this one is
        spent): a frame begun under the wider limit is checked against the new one with the next ``feed``."""
        reader = FrameReader(max_payload)
        reader._buffer, self._buffer = self._buffer, bytearray()
        reader._broken = self._broken
        return reader

    def large_frame(self, at_least: int, reserve: Callable[[int], bool] | None = None
                    ) -> tuple[Kind, int, memoryview, bool] | None:
        """When the bytes held are the start of one frame whose payload is ``at_least`` bytes or more (its header
        already checked by ``feed``): its kind, its payload's size, what arrived of the payload, and whether
        ``reserve`` granted the size. The reader then holds nothing: its owner reads the rest of the frame itself,
        into a buffer of its own. Else None.

        The frame is handed over once half of its payload arrived, or before that when ``reserve(size)`` grants the
        payload's size (a budget of frames arriving; the owner gives it back once the frame is whole): so what a
        peer that announces a large frame and sends nothing makes this side hold is what it sent, at most twice
        that once it sent half, or what the budget lets out, never the announced size unbounded."""
        buffer = self._buffer
        if len(buffer) < HEADER.size:
            return None
        length, kind_byte = HEADER.unpack_from(buffer)
        have = len(buffer) - HEADER.size
        if length - 1 < at_least:
            return None
        reserved = False
        if have * 2 < length - 1:
            if reserve is None or not reserve(length - 1):
                return None
            reserved = True
        self._buffer = bytearray()
        return Kind(kind_byte), length - 1, memoryview(buffer)[HEADER.size:], reserved

    def _check(self, length: int, kind_byte: int) -> str | None:
        return header_problem(length, kind_byte, self.max_payload)


def header_problem(length: int, kind_byte: int, max_payload: int) -> str | None:
    """What is wrong with a frame header of ``length`` and ``kind_byte`` when data frames may hold ``max_payload``
    bytes (control frames ``MAX_CONTROL_BYTES``), or None."""
    if length < 1:
        return "a frame's length counts its kind byte: 0 is not a frame"
    if kind_byte not in _KINDS:
        return f"unknown frame kind {kind_byte} (this side knows {', '.join(k.name for k in Kind)})"
    limit = _limit_of(kind_byte, max_payload)
    if length - 1 > limit:
        return f"{Kind(kind_byte).name} frame of {length - 1} bytes: over the limit of {limit}"
    return None


def _limit_of(kind: int, max_payload: int) -> int:
    """The longest payload of a frame of ``kind`` when data frames may hold ``max_payload`` bytes."""
    if kind in _DATA_KINDS:
        return max_payload
    return MAX_READ_REQUEST_BYTES if kind == Kind.READ else MAX_CONTROL_BYTES


_KINDS = frozenset(int(kind) for kind in Kind)
_DATA_KINDS = frozenset((Kind.ADDS, Kind.ANSWERS, Kind.READ_ANSWER))
_KIND_OF = {int(kind): kind for kind in Kind}


class _Rules:
    """Which kind may come next from the other side: the first frame, then the stream's frames, then nothing
    after an END."""

    __slots__ = ("_stage",)
    FIRST: Kind
    LATER: tuple[Kind, ...]

    def __init__(self, past_first: bool = False) -> None:
        self._stage = 1 if past_first else 0  # 0: before the first frame; 1: the stream; 2: after its END

    def check(self, kind: Kind) -> str | None:
        """None if ``kind`` may come now (and the rules move on), else the problem."""
        if self._stage == 2:
            return f"{kind.name} frame after the END: the stream is over"
        if self._stage == 0:
            if kind is Kind.END:
                self._stage = 2
                return None
            if kind is not self.FIRST:
                return f"the first frame must be {self.FIRST.name}, not {kind.name}"
            self._stage = 1
            return None
        if kind not in self.LATER:
            return f"{kind.name} frame not allowed here (expected {' or '.join(k.name for k in self.LATER)})"
        if kind is Kind.END:
            self._stage = 2
        return None


class ServerRules(_Rules):
    """What a bookie takes from a client: HELLO, then ADDS until END."""

    __slots__ = ()
    FIRST = Kind.HELLO
    LATER = (Kind.ADDS, Kind.END)


class ClientRules(_Rules):
    """What a client takes from a bookie: WELCOME, then ANSWERS until END."""

    __slots__ = ()
    FIRST = Kind.WELCOME
    LATER = (Kind.ANSWERS, Kind.END)


class ReadServerRules(_Rules):
    """What a bookie takes from a client on a read connection: HELLO, then READ until END."""

    __slots__ = ()
    FIRST = Kind.HELLO
    LATER = (Kind.READ, Kind.END)


class ReadClientRules(_Rules):
    """What a client takes from a bookie on a read connection: WELCOME, then READ_ANSWER until END."""

    __slots__ = ()
    FIRST = Kind.WELCOME
    LATER = (Kind.READ_ANSWER, Kind.END)
