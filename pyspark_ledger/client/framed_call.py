"""A framed add stream's call (docs/protocol.md W11): what ``AddStream`` does with a gRPC AddStream call, over a
plain TCP connection to the bookie's framed add port, on the client's ``IoLoop``.

``FramedCall`` offers the four operations ``AddStream`` uses -- ``write`` (an AddBatch's bytes), ``read`` (the
next ``AddResultBatch``, or ``grpc.aio.EOF`` once the bookie ended the stream with an OK END), ``done_writing``
(the client's END) and ``cancel`` -- and connects at its first use: TCP within ``CONNECT_TIMEOUT_S``, the HELLO
(asking for answers as runs, docs/protocol.md W9, when the client does), then the WELCOME within the same time,
which must name the bookie the client meant to reach. A failure is a ``BookieError`` from the status registry:
``BookieUnavailableError`` when the port cannot be reached or the connection breaks or ends without an END, the
END's own status otherwise (TOO_MANY_REQUESTS past the bookie's ``--max-add-streams``, BAD_REQUEST for a frame it
refused), and RPC_FAILED for frames this client cannot take (out of order, unknown, over ``MAX_ANSWER_BYTES``).
Every frame's header is checked before its payload is read.
"""
from __future__ import annotations

import asyncio
import socket

import grpc.aio

from pyspark_ledger.errors import BookieError, BookieUnavailableError, error_for_status
from pyspark_ledger.status import BookieStatus, as_status
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

CONNECT_TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 64 * 1024 * 1024
JOIN_BELOW_BYTES = 64 * 1024  # a smaller batch is joined to its header: one send instead of two


class FramedCall:
    """One framed add stream to ``host:port`` of bookie ``bookie_id`` (see the module docstring); loop thread only."""

    def __init__(self, host: str, port: int, bookie_id: str, answer_runs: bool = True) -> None:
        self._host, self._port, self.bookie_id = host, port, bookie_id
        self._flags = frames.ANSWER_RUNS if answer_runs else 0
        self._opening: asyncio.Future | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._rules = frames.ClientRules()
        self._cancelled = False
        self.granted_flags = 0

    # --- what AddStream uses ------------------------------------------------------------------------
    async def write(self, batch: bytes) -> None:
        writer = await self._open()
        try:
            if len(batch) < JOIN_BELOW_BYTES:
                writer.write(frames.header(Kind.ADDS, len(batch)) + batch)
            else:
                writer.write(frames.header(Kind.ADDS, len(batch)))
                writer.write(batch)
            await writer.drain()
        except (OSError, RuntimeError) as exc:
            raise self._broken(f"sending to it failed: {exc}") from exc

    async def done_writing(self) -> None:
        writer = await self._open()
        try:
            writer.write(frames.end(pb.OK))
            await writer.drain()
        except (OSError, RuntimeError) as exc:
            raise self._broken(f"sending its END failed: {exc}") from exc

    async def read(self):
        await self._open()
        kind, payload = await self._next_frame()
        if kind is Kind.ANSWERS:
            try:
                return pb.AddResultBatch.FromString(payload)
            except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError: the bookie's bytes
                raise self._failed(f"its ANSWERS frame is not an AddResultBatch: {exc}") from exc
        status, message = frames.parse_end(payload)
        if status == pb.OK:
            return grpc.aio.EOF
        raise self._ended(as_status(status), message)

    def cancel(self) -> bool:
        self._cancelled = True
        if self._writer is not None:
            self._writer.transport.abort()
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        return True

    # --- the connection ------------------------------------------------------------------------------
    async def _open(self) -> asyncio.StreamWriter:
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._connect())
        await asyncio.shield(self._opening)  # a reader and a writer may both wait for it
        if self._cancelled:
            raise self._broken("the call was cancelled", BookieStatus.CANCELLED)
        return self._writer

    async def _connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            why = (f"cannot connect: {exc or 'timed out'} (if only the bookie's gRPC port is reachable from here, "
                   "start it without --add-port or set ClientConfig(framed_adds=False))")
            raise self._broken(why) from exc
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writer.write(frames.hello(frames.VERSION, self._flags))
        try:
            kind, payload = await asyncio.wait_for(self._next_frame(), CONNECT_TIMEOUT_S)
        except asyncio.TimeoutError as exc:
            self._writer.transport.abort()
            raise self._broken(f"no WELCOME within {CONNECT_TIMEOUT_S:.0f} s") from exc
        if kind is Kind.END:
            status, message = frames.parse_end(payload)
            self._writer.transport.abort()
            raise self._ended(as_status(status), message)
        try:
            _, self.granted_flags, answered_as = frames.parse_welcome(payload, self._flags)
        except ValueError as exc:
            self._writer.transport.abort()
            raise self._failed(f"its WELCOME is malformed: {exc}") from exc
        if answered_as != self.bookie_id:
            self._writer.transport.abort()
            raise self._broken(f"the port answered as bookie {answered_as!r}: is the registration stale?")

    async def _next_frame(self) -> tuple[Kind, bytes]:
        try:
            head = await self._reader.readexactly(frames.HEADER.size)
            length, kind_byte = frames.HEADER.unpack(head)
            problem = frames.header_problem(length, kind_byte, MAX_ANSWER_BYTES)
            if problem is None:
                problem = self._rules.check(Kind(kind_byte))
            if problem is not None:
                self._writer.transport.abort()
                raise self._failed(f"it sent a frame this client cannot take: {problem}")
            payload = await self._reader.readexactly(length - 1)
        except asyncio.IncompleteReadError as exc:
            raise self._broken("it closed the connection without an END") from exc
        except OSError as exc:
            raise self._broken(f"the connection broke: {exc}") from exc
        return Kind(kind_byte), payload

    # --- errors ---------------------------------------------------------------------------------------
    def _what(self) -> str:
        return f"framed add stream to bookie {self.bookie_id} ({self._host}:{self._port})"

    def _broken(self, why: str, status: BookieStatus = BookieStatus.UNAVAILABLE) -> BookieUnavailableError:
        return BookieUnavailableError(f"{self._what()}: {why}", bookie_id=self.bookie_id, status=status)

    def _failed(self, why: str) -> BookieError:
        return BookieError(f"{self._what()}: {why}", bookie_id=self.bookie_id, status=BookieStatus.RPC_FAILED)

    def _ended(self, status: BookieStatus, message: str) -> BookieError:
        why = f"the bookie ended it with {status.name}: {message}"
        error = error_for_status(status, f"{self._what()}: {why}", bookie_id=self.bookie_id) \
            if status.on_wire and status is not BookieStatus.OK else None
        return error if isinstance(error, BookieError) else self._failed(why)
