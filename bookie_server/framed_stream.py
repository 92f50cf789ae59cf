"""One connection of the framed add port (docs/protocol.md W11) once its handshake is done: ``FramedRequests``
turns its ADDS frames into the ``ReceivedBatch``es the add handler reads, and ``FramedServerCall`` stands for
gRPC's servicer context (the peer, the HELLO's flags, the end-of-call callbacks, ``abort``). The listener
(``framed_listener``) accepts connections, runs their handshake and serves each with these.

What a connection holds of a frame still arriving grows with what was sent, at most twice it
(``FrameReader.large_frame``), unless the bookie-wide budget of frames arriving (``limits.arriving_frames_bytes``)
grants a large frame's size at once: then the frame is read straight into its own buffer, and after a large frame
the next header is read alone (``next_receive``), so that the next large frame is copied nowhere on its way in.

Everything else arrives in one buffer per connection, made when its stream starts and read into again and again
(``recv_into``): no allocation per ``recv``. A ``recv`` of a new bytes object of ``RECEIVE_BYTES`` made glibc map
and unmap that much for every add wherever its malloc thresholds were not raised (``bookie_server.memory``: an
operator's own ``MALLOC_*`` settings, the benchmark's servers), about 50 µs of a paced add's CPU
(docs/measurements.md, "A map and an unmap per received add").
"""
from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass
from typing import Callable

from bookie_server.add_wire import ReceivedBatch, decode_add_batch
from bookie_server.framed_tls import TlsConnection
from bookie_server.limits import Budget
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.ack_runs import ASK_FOR_RUNS
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

_log = logging.getLogger(__name__)
RECEIVE_BYTES = 256 * 1024  # one recv at most (a larger frame arrives in several): each connection's buffer
LARGE_FRAME_BYTES = 64 * 1024  # a frame at least this large is read straight into its own buffer
_STATUS_OF_CODE = {"RESOURCE_EXHAUSTED": pb.TOO_MANY_REQUESTS, "INVALID_ARGUMENT": pb.BAD_REQUEST}


class Ended(Exception):
    """The handler ended the stream (``FramedServerCall.abort``): its END status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class Opened:
    """A connection past its handshake: its frames so far and what the HELLO asked."""

    reader: frames.FrameReader
    rules: frames.ServerRules
    received: list
    answer_runs: bool
    reads: bool = False  # a read connection (docs/protocol.md W12), not an add stream
    welcome: bytes = b""  # a read connection's WELCOME, sent once it has its slot


class FramedServerCall:
    """Stands for gRPC's servicer context in ``BookieServicer.AddStream``: the peer, the HELLO's flags as
    metadata, the TLS identity (none over plaintext), the end-of-call callbacks, and ``abort``."""

    def __init__(self, conn, peer: str, answer_runs: bool) -> None:
        self._conn = conn
        self._peer = peer
        self._metadata = ASK_FOR_RUNS if answer_runs else ()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._done = False

    def peer(self) -> str:
        return self._peer

    @property
    def answer_sender(self):
        """This call, for answers the journal thread may send itself (``answer_outbox``): plaintext only (a TLS
        connection encrypts under its own locks, and its answers go the handler thread's way)."""
        return None if isinstance(self._conn, TlsConnection) else self

    def answer_bytes(self, answer) -> bytes:
        data = answer.SerializeToString()
        return frames.header(Kind.ANSWERS, len(data)) + data

    def send_now(self, data: bytes) -> int:
        return self._conn.send(data, socket.MSG_DONTWAIT)

    def send_all(self, data: bytes) -> None:
        self._conn.sendall(data)

    def invocation_metadata(self):
        return self._metadata

    def auth_context(self) -> dict:
        if isinstance(self._conn, TlsConnection):
            return self._conn.auth_context()
        return {}  # plaintext: no verified identity, so never an administrator

    def add_callback(self, callback: Callable[[], None]) -> bool:
        with self._lock:
            if self._done:
                return False
            self._callbacks.append(callback)
            return True

    def is_active(self) -> bool:
        return not self._done

    def abort(self, code, details: str):
        """End the stream with an END of the code's status, and stop its reader (as gRPC's abort ends the call)."""
        self.stop_reading()
        raise Ended(_STATUS_OF_CODE.get(getattr(code, "name", ""), pb.IO_ERROR), details)

    def stop_reading(self) -> None:
        try:
            self._conn.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def end(self) -> None:
        """The call is over (the connection broke, or its stream ended): the end-of-call callbacks run once."""
        with self._lock:
            if self._done:
                return
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 - as gRPC: a callback's failure is logged, the others run
                _log.exception("an add stream's end-of-call callback failed")


class FramedRequests:
    """The ADDS frames of one connection as ``ReceivedBatch``es, read on the session's reader thread. They end at
    the client's END (its half-close), at a broken connection (which ends the call: ``FramedServerCall.end``), or at a
    frame that breaks the rules, whose problem the stream's END then gives.

    ADDS frames of small adds that one ``recv`` brought together are handed on as one batch (``merge``), up to
    ``max_merged_adds`` adds and ``max_merged_bytes`` bytes (what one AddBatch may hold: a merged batch is never
    larger than a message the client could have sent, so it fits every budget such a message fits). A client that
    sends each add as soon as it can (docs/protocol.md W10) and a bookie that fell behind then meet as the client's
    window would have them meet: the adds that waited in the connection are stored, committed and answered
    together instead of one message at a time."""

    def __init__(self, conn, opened: Opened, call: FramedServerCall, arriving: Budget,
                 max_merged_adds: int = 1, max_merged_bytes: int = 0) -> None:
        self._conn, self._opened, self._call, self._arriving = conn, opened, call, arriving
        self._max_merged_adds, self._max_merged_bytes = max_merged_adds, max_merged_bytes
        self.problem: str | None = None

    def __iter__(self):
        opened = self._opened
        pending, rules, reader = opened.received, opened.rules, opened.reader
        header_first = False  # after a large frame: read the next header alone (``next_receive``)
        merged = None  # small adds decoded from the frames at hand, not yet handed on
        inbox = memoryview(bytearray(RECEIVE_BYTES))  # read into again and again (``feed`` copies what it keeps)
        try:
            while True:
                while pending:
                    kind, payload = pending.pop(0)
                    problem = rules.check(kind)
                    if problem is None and kind is Kind.END:
                        if merged is not None:
                            yield merged
                        return
                    if problem is None:
                        try:
                            batch = decode_add_batch(payload)
                        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError: the client's bytes
                            problem = f"an ADDS frame that is not an AddBatch: {exc}"
                    if problem is not None:
                        if merged is not None:  # the adds before the bad frame are the client's: served first
                            yield merged
                        self.problem = problem
                        return
                    del payload
                    joined = None if merged is None else merge(merged, batch, self._max_merged_adds,
                                                               self._max_merged_bytes)
                    if merged is not None and joined is None:  # it cannot take this frame's adds: it goes first
                        yield merged
                    merged = joined or batch
                    del batch, joined
                if merged is not None:
                    yield merged
                    merged = None
                count = self._conn.recv_into(inbox[:next_receive(header_first, reader.pending)]
                                             if header_first else inbox)
                if not count:  # gone without its END: the call is over, as a cancelled gRPC call
                    self._call.end()
                    return
                pending.extend(reader.feed(inbox[:count]))
                large = None if pending else reader.large_frame(LARGE_FRAME_BYTES, self._arriving.try_take)
                header_first = large is not None or (header_first and reader.pending < frames.HEADER.size)
                if large is not None:
                    kind, size, held, reserved = large
                    try:
                        payload = self._receive_large(size, held)
                    finally:
                        if reserved:
                            self._arriving.give_back(size)
                    if payload is None:  # gone mid-frame
                        self._call.end()
                        return
                    pending.append((kind, payload))
        except ValueError as exc:  # the framing is broken
            self.problem = str(exc)
        except OSError:
            self._call.end()

    def _receive_large(self, size: int, held: memoryview) -> bytes | bytearray | None:
        """A large frame's payload of ``size`` bytes, ``held`` of which arrived already, read straight from the
        connection into a buffer of its own; None if the connection ended first. On a plaintext connection, with
        nothing held (every large frame after the first: ``next_receive``), one ``recv`` that waits for all of it
        (``MSG_WAITALL``) into a new bytes object, which Python does not fill with zeros first: a bytearray would be
        zeroed (a megabyte's worth per 1 MiB add) only to be overwritten."""
        if not held and not isinstance(self._conn, TlsConnection):
            data = self._conn.recv(size, socket.MSG_WAITALL)
            if len(data) == size or not data:
                return data or None
            held = memoryview(data)  # cut short (a signal, or the peer gone): the rest below
        payload = bytearray(size)
        have = len(held)
        payload[:have] = held
        del held
        view = memoryview(payload)
        while have < size:
            received = self._conn.recv_into(view[have:])
            if not received:
                return None
            have += received
        return payload


def merge(first: ReceivedBatch, second: ReceivedBatch, max_adds: int, max_bytes: int) -> ReceivedBatch | None:
    """``first``'s adds then ``second``'s as one batch, if both are of small adds (neither decoded in place: large
    bodies are views of their own frames, and travel alone) and together hold at most ``max_adds`` adds and
    ``max_bytes`` bytes on the wire; else None. The size is the sum of both sizes on the wire."""
    if (first.in_place or second.in_place or len(first.adds) + len(second.adds) > max_adds
            or first.nbytes + second.nbytes > max_bytes):
        return None
    adds = first.adds if isinstance(first.adds, list) else list(first.adds)
    adds.extend(second.adds)
    return ReceivedBatch(adds, first.nbytes + second.nbytes, False)


def next_receive(header_first: bool, held: int) -> int:
    """How many bytes the next ``recv`` of a connection asks for, the reader holding ``held``. After a large frame
    (``header_first``) the next header alone, so that when it announces one more large frame, as is likely, none of
    that frame's bytes were copied through the reader before its own buffer takes them (``FrameReader.large_frame``).
    Else as much as one ``recv`` takes (``RECEIVE_BYTES``): many small frames per call."""
    return frames.HEADER.size - held if header_first and held < frames.HEADER.size else RECEIVE_BYTES
