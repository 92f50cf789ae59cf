"""A framed add stream's call (docs/protocol.md W11): what ``AddStream`` does with a gRPC AddStream call, over a
plain TCP connection to the bookie's framed add port, on the client's ``IoLoop``.

``FramedCall`` offers the four operations ``AddStream`` uses -- ``write`` (an AddBatch's bytes), ``read`` (the
next ``AddResultBatch``, or ``grpc.aio.EOF`` once the bookie ended the stream with an OK END), ``done_writing``
(the client's END) and ``cancel`` -- and connects at its first use: TCP within ``CONNECT_TIMEOUT_S``, the HELLO
(asking for answers as runs, docs/protocol.md W9, when the client does), then the WELCOME within the same time,
which must name the bookie the client meant to reach. With an ``ssl_context`` (a client with TLS settings) the
connection is TLS, and the bookie's certificate must be valid for the host the client connects to, as on gRPC.
``write_now`` is ``write`` without a coroutine, for a caller already on the loop; ``may_write_now`` says whether
it may be used (the connection is open, and its send buffer below the transport's high-water mark: past it,
``write`` waits until it drained). ``answers_to(handler)`` is ``read`` without a coroutine: the handler is called
as answers arrive and takes them with ``read_nowait``, so an answer reaches the stream in the loop's turn that
received its bytes, with no task to wake.

``open()`` connects (and handshakes) ahead of any write. When that fails because the port cannot be reached
at all -- no TCP connection within ``CONNECT_TIMEOUT_S`` (a TLS handshake the bookie refused does not count), no
WELCOME in that time, or a WELCOME from another bookie (a stale registration) -- ``fallback_ok`` is True:
nothing was sent, so the caller may take the bookie's gRPC port instead (docs/protocol.md W11).

Frames are parsed as the bytes arrive (``data_received``, one ``FrameReader``), so a ``read`` that finds an
answer waiting returns it without suspending. A failure is a ``BookieError`` from the status registry:
``BookieUnavailableError`` when the port cannot be reached or the connection breaks or ends without an END, the
END's own status otherwise (TOO_MANY_REQUESTS past the bookie's ``--max-add-streams``, BAD_REQUEST for a frame it
refused), and RPC_FAILED for frames this client cannot take (out of order, unknown, over ``MAX_ANSWER_BYTES``):
every frame's header is checked before its payload is waited for. Frames that arrived before a failure are read
first; the failure is raised once they are.
"""
from __future__ import annotations

import asyncio
import collections
import socket
import ssl
from typing import Callable

import grpc.aio

from pyspark_ledger.client.add_wire import LargeAdd
from pyspark_ledger.errors import BookieError, BookieUnavailableError, error_for_status
from pyspark_ledger.status import BookieStatus, as_status
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

CONNECT_TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 64 * 1024 * 1024
JOIN_BELOW_BYTES = 64 * 1024  # a smaller batch is joined to its header: one send instead of two
RECEIVE_BUFFER_BYTES = 64 * 1024  # what one read of the connection takes at most


class FramedCall:
    """One framed add stream to ``host:port`` of bookie ``bookie_id`` (see the module docstring); loop thread only."""

    framed = True  # (an AddStream's window follows its transport: batch_window.batches_in_flight_for)

    def __init__(self, host: str, port: int, bookie_id: str, answer_runs: bool = True,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._host, self._port, self.bookie_id = host, port, bookie_id
        self._ssl = ssl_context  # TLS (the client's TLS settings): the bookie's certificate must name ``host``
        self._flags = frames.ANSWER_RUNS if answer_runs else 0
        self._opening: asyncio.Future | None = None
        self._transport: asyncio.Transport | None = None
        self._open = False  # the WELCOME was taken: adds may go
        self._reader = frames.FrameReader(MAX_ANSWER_BYTES)
        self._rules = frames.ClientRules()
        self._frames: collections.deque[tuple[Kind, bytes]] = collections.deque()
        self._waiter: asyncio.Future | None = None  # a read waiting for a frame
        self._failure: BookieError | None = None  # raised once the frames before it were read
        self._paused = False
        self._drained: asyncio.Future | None = None  # a write waiting for the send buffer to drain
        self._cancelled = False
        self._handler: Callable[[], None] | None = None  # takes answers as they arrive (``answers_to``)
        self._handling = False
        self.granted_flags = 0
        self.fallback_ok = False  # the port could not be reached at all: nothing was sent (see the docstring)

    # --- what AddStream uses ------------------------------------------------------------------------
    async def open(self) -> None:
        """Connect and handshake now (a ``BookieError`` if that fails; see ``fallback_ok``)."""
        await self._ready()

    def may_write_now(self) -> bool:
        return self._open and not self._paused and self._failure is None and not self._cancelled

    def write_now(self, batch: bytes | LargeAdd) -> None:
        """Send an ADDS frame at once (only when ``may_write_now``)."""
        transport = self._transport
        if type(batch) is LargeAdd:  # its payload is written as it is, never copied into one buffer
            transport.write(frames.header(Kind.ADDS, len(batch)) + batch.head)
            transport.write(batch.payload)
        elif len(batch) < JOIN_BELOW_BYTES:
            transport.write(frames.header(Kind.ADDS, len(batch)) + batch)
        else:
            transport.write(frames.header(Kind.ADDS, len(batch)))
            transport.write(batch)

    async def write(self, batch: bytes | LargeAdd) -> None:
        await self._ready()
        if self._paused:
            await self._drain()
        self._check_sendable("sending to it failed")
        self.write_now(batch)

    async def done_writing(self) -> None:
        await self._ready()
        self._check_sendable("sending its END failed")
        self._transport.write(frames.end(pb.OK))

    async def read(self):
        await self._ready()
        return self._answer(*await self._next_frame())

    def answers_to(self, handler: Callable[[], None] | None) -> None:
        """Call ``handler()`` on the loop thread, as the bytes arrive, whenever answers arrived or the call failed
        (once now as well: frames may be waiting); it takes them with ``read_nowait``. Only once the call is open
        (after ``open()``); None stops it. A handler is not called again while it runs: it reads until
        ``read_nowait`` returns None."""
        self._handler = handler
        if handler is not None:
            self._call_handler()

    def read_nowait(self):
        """What ``read`` would return without waiting: the next ``AddResultBatch`` or ``grpc.aio.EOF``, None if
        nothing has arrived, or the failure (raised) once the frames before it were read."""
        if self._frames:
            return self._answer(*self._frames.popleft())
        if self._failure is not None:
            raise self._failure
        return None

    def _answer(self, kind: Kind, payload: bytes):
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
        if self._transport is not None:
            self._transport.abort()
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        self._fail(self._broken("the call was cancelled", BookieStatus.CANCELLED))
        return True

    # --- the connection ------------------------------------------------------------------------------
    async def _ready(self) -> None:
        if self._open and not self._cancelled:
            return
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._connect())
        await asyncio.shield(self._opening)  # a reader and a writer may both wait for it
        if self._cancelled:
            raise self._broken("the call was cancelled", BookieStatus.CANCELLED)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            tls = {} if self._ssl is None else {"ssl": self._ssl, "server_hostname": self._host,
                                                "ssl_handshake_timeout": CONNECT_TIMEOUT_S}
            self._transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: _Protocol(self), self._host, self._port, **tls), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            self.fallback_ok = not isinstance(exc, ssl.SSLError)  # a refused TLS handshake is not "unreachable"
            how = "cannot connect over TLS" if self._ssl is not None else "cannot connect"
            why = (f"{how}: {exc or 'timed out'} (if only the bookie's gRPC port is reachable from "
                   "here, start it without --add-port or set ClientConfig(framed_adds=False))")
            raise self._broken(why) from exc
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._transport.write(frames.hello(frames.VERSION, self._flags))
        try:
            kind, payload = await asyncio.wait_for(self._next_frame(), CONNECT_TIMEOUT_S)
        except asyncio.TimeoutError as exc:
            self._transport.abort()
            self.fallback_ok = True  # something listens there, but it is not a bookie's framed port
            raise self._broken(f"no WELCOME within {CONNECT_TIMEOUT_S:.0f} s") from exc
        if kind is Kind.END:
            status, message = frames.parse_end(payload)
            self._transport.abort()
            raise self._ended(as_status(status), message)
        try:
            _, self.granted_flags, answered_as = frames.parse_welcome(payload, self._flags)
        except ValueError as exc:
            self._transport.abort()
            raise self._failed(f"its WELCOME is malformed: {exc}") from exc
        problem = frames.welcome_problem(answered_as, self.bookie_id)
        if problem is not None:
            self._transport.abort()
            self.fallback_ok = True
            raise self._broken(problem)
        self._open = True

    async def _next_frame(self) -> tuple[Kind, bytes]:
        while not self._frames:
            if self._failure is not None:
                raise self._failure
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._frames.popleft()

    async def _drain(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drained)

    def _check_sendable(self, what: str) -> None:
        if self._failure is not None:
            raise self._broken(f"{what}: the stream has ended ({self._failure})")

    # --- what the protocol reports (loop thread) ---------------------------------------------------------
    def _received(self, data: memoryview) -> None:
        if self._failure is not None:
            return
        try:
            received = self._reader.feed(data)
        except ValueError as problem:
            self._transport.abort()
            self._fail(self._failed(f"it sent a frame this client cannot take: {problem}"))
            return
        for kind, payload in received:
            problem = self._rules.check(kind)
            if problem is not None:
                self._transport.abort()
                self._fail(self._failed(f"it sent a frame this client cannot take: {problem}"))
                return
            self._frames.append((kind, payload))
        if received:
            self._wake()

    def _lost(self, exc: Exception | None) -> None:
        self._fail(self._broken("it closed the connection without an END" if exc is None
                                else f"the connection broke: {exc}"))

    def _set_paused(self, paused: bool) -> None:
        self._paused = paused
        if not paused:
            self._release_drain()

    def _fail(self, failure: BookieError) -> None:
        if self._failure is None:
            self._failure = failure
        self._wake()
        self._release_drain()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._handler is not None:
            self._call_handler()

    def _call_handler(self) -> None:
        if self._handling:  # it reads on until nothing is left: what just arrived included
            return
        self._handling = True
        try:
            self._handler()
        finally:
            self._handling = False

    def _release_drain(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

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


class _Protocol(asyncio.BufferedProtocol):
    """Hands the connection's events to its ``FramedCall``. Received bytes land in one buffer kept for the
    connection (``recv_into``): a plain Protocol would get a fresh ``bytes`` per read, allocated at the read size
    of 256 KiB and then shrunk, which costs an mmap, an mremap and a munmap per answer."""

    def __init__(self, call: FramedCall) -> None:
        self._call = call
        self._buffer = memoryview(bytearray(RECEIVE_BUFFER_BYTES))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self._call._received(self._buffer[:nbytes])

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._call._lost(exc)

    def pause_writing(self) -> None:
        self._call._set_paused(True)

    def resume_writing(self) -> None:
        self._call._set_paused(False)
