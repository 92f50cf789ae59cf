"""Range reads on a bookie's framed port (docs/protocol.md W12): what a gRPC Read does, over plain TCP or TLS.

``FramedReads`` keeps up to ``CONNECTIONS_PER_BOOKIE`` read connections to one bookie's framed port, on the
client's ``IoLoop`` (loop thread only). ``read(request, timeout)`` sends a READ frame on an idle connection (a new
one while fewer are open; else the one with the fewest reads waiting: a bookie answers a connection's reads in the
order they came), all within the read's timeout (its wait for a connection included), and returns the answer
decoded as the gRPC path decodes it (``read_wire.decode_read_response``: large entries are views of the received
bytes). A large answer is received straight into a buffer of its own size,
so its bytes are copied once, by the kernel; gRPC copies each answer into frames and then into a ``bytes`` of its own
(docs/measurements.md, "Range reads without gRPC").

A connection opens as an add stream's does (W11): TCP and, with the client's TLS settings, TLS (the bookie's
certificate valid for the host dialed) within ``CONNECT_TIMEOUT_S``, a HELLO asking ``frames.READS``, and a WELCOME
that grants it and names the bookie meant. When that fails because the port cannot be used for reads -- no
connection, no WELCOME in time, another bookie's WELCOME, a bookie that does not grant reads (an earlier version),
or one that refused the connection past its ``--max-read-connections`` -- ``read`` raises ``FramedReadsUnusable``:
nothing was sent, and the caller takes the gRPC port. Once a READ was sent, a failure is the read's: a connection
that breaks or ends fails every read waiting on it with ``BookieUnavailableError`` -- except that a read which
met the bookie's OK END (a connection it ended as idle just as the read was sent: the bookie reads nothing after
deciding so) is sent once more, on a new connection (reads change nothing); a read not answered within its
timeout fails with status TIMEOUT and aborts its connection (the reads behind it on that connection could only be
answered after it), and frames this client cannot take (over ``MAX_ANSWER_BYTES``, out of order, an answer to no
read) fail the connection with RPC_FAILED.
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import socket
import ssl
import time
from typing import Callable

from pyspark_ledger.client.read_wire import decode_read_response
from pyspark_ledger.errors import BookieError, BookieUnavailableError, error_for_status
from pyspark_ledger.status import BookieStatus, as_status
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 10.0
CONNECTIONS_PER_BOOKIE = 4
MAX_ANSWER_BYTES = 256 * 1024 * 1024  # the longest READ_ANSWER taken (a bookie's answers stop at the max_bytes asked)
RECEIVE_BUFFER_BYTES = 64 * 1024  # frames shorter than this are parsed from one buffer kept per connection
DIRECT_BYTES = RECEIVE_BUFFER_BYTES  # a frame at least this long is received into a buffer of its own size


class FramedReadsUnusable(Exception):
    """The framed port cannot serve this client's reads now; nothing was sent (take the gRPC port)."""


class FramedReadRoute:
    """Which read connections a bookie's range reads take now (loop thread only): ``current()`` is the bookie's
    ``FramedReads``, made at the first read on the port ``read_port()`` names, or None (gRPC) while it names none or
    for ``retry_s`` after no read connection to it could be used (``unusable``). ``ssl_context()``: the client's TLS
    settings for the port (None without TLS)."""

    def __init__(self, host: str, bookie_id: str, read_port: Callable[[], int],
                 ssl_context: Callable[[], "ssl.SSLContext | None"], retry_s: float) -> None:
        self._host, self._bookie_id = host, bookie_id
        self._read_port, self._ssl_context, self._retry_s = read_port, ssl_context, retry_s
        self._reads: FramedReads | None = None
        self._off_until = 0.0  # monotonic: until then range reads take gRPC

    def current(self) -> "FramedReads | None":
        if self._reads is not None:
            return self._reads
        if time.monotonic() < self._off_until:
            return None
        port = self._read_port()
        if not port:
            self._off_until = time.monotonic() + self._retry_s  # asked again later, not per read
            return None
        self._reads = FramedReads(self._host, port, self._bookie_id, ssl_context=self._ssl_context())
        return self._reads

    def unusable(self, reads: "FramedReads", error: FramedReadsUnusable) -> None:
        """A read found no usable connection (it takes gRPC); the port too, when none of its connections works."""
        if reads.open_connections:
            return
        if self._reads is reads:
            self._reads = None
            self._off_until = time.monotonic() + self._retry_s
            log.info("%s; reads from bookie %s take its gRPC port instead, and its framed port is tried again in "
                     "%.0f s", error, self._bookie_id, self._retry_s)
        reads.close()

    def close(self) -> None:
        reads, self._reads = self._reads, None
        if reads is not None:
            reads.close()


class FramedReads:
    """The read connections to one bookie's framed port (see the module docstring); loop thread only."""

    def __init__(self, host: str, port: int, bookie_id: str, ssl_context: ssl.SSLContext | None = None,
                 connections: int = CONNECTIONS_PER_BOOKIE) -> None:
        self.host, self.port, self.bookie_id = host, port, bookie_id
        self._ssl = ssl_context
        self._limit = connections
        self._connections: list[_Connection] = []
        self._closed = False

    async def read(self, request: pb.ReadRequest, timeout: float):
        """The bookie's answer to ``request`` (a ``WireReadResponse`` or ``pb.ReadResponse``); FramedReadsUnusable
        if no connection could be opened (nothing sent), a BookieError if the read failed."""
        if self._closed:
            raise BookieUnavailableError(f"framed reads of bookie {self.bookie_id} are closed",
                                         bookie_id=self.bookie_id, status=BookieStatus.CLOSED)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for attempt in (0, 1):
            connection = self._pick()
            try:  # the read's own timeout bounds its wait for a connection too (the handshake goes on)
                await asyncio.wait_for(asyncio.shield(connection.ready()), max(deadline - loop.time(), 0.0))
            except asyncio.TimeoutError:
                raise BookieUnavailableError(
                    f"framed read connection to bookie {self.bookie_id} ({self.host}:{self.port}): not open "
                    f"within the read's {timeout:g} s", bookie_id=self.bookie_id, status=BookieStatus.TIMEOUT) from None
            try:
                return await connection.read(request, max(deadline - loop.time(), 0.001))
            except BookieUnavailableError:
                if attempt or not connection.ended_idle:
                    raise
        raise AssertionError("unreachable")  # (the second attempt returned or raised)

    def close(self) -> None:
        """End every connection (an END, then close); reads still waiting fail as cancelled."""
        self._closed = True
        connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()

    @property
    def open_connections(self) -> int:
        return len([connection for connection in self._connections if connection.usable])

    def _pick(self) -> "_Connection":
        self._connections = [connection for connection in self._connections if connection.usable]
        idle = [connection for connection in self._connections if not connection.waiting]
        if idle:
            return idle[0]
        if len(self._connections) < self._limit:
            connection = _Connection(self.host, self.port, self.bookie_id, self._ssl)
            self._connections.append(connection)
            return connection
        return min(self._connections, key=lambda connection: connection.waiting)


class _Connection:
    """One read connection: its handshake, the reads waiting for answers in the order sent, and its frames."""

    def __init__(self, host: str, port: int, bookie_id: str, ssl_context: ssl.SSLContext | None) -> None:
        self._host, self._port, self.bookie_id = host, port, bookie_id
        self._ssl = ssl_context
        self._transport: asyncio.Transport | None = None
        self._opening: asyncio.Future | None = None
        self._open = False
        self._ids = itertools.count()
        self._waiting: collections.OrderedDict[int, asyncio.Future] = collections.OrderedDict()
        self._welcome: asyncio.Future | None = None
        self._rules = frames.ReadClientRules()
        self._failure: BookieError | None = None
        self.ended_idle = False  # the bookie ended it with OK (idle): a READ it crossed was never read, so resent

    @property
    def usable(self) -> bool:
        return self._failure is None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def ready(self) -> None:
        if self._open:
            return
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._connect())
        await asyncio.shield(self._opening)  # several reads may wait for the one handshake

    async def read(self, request: pb.ReadRequest, timeout: float):
        if self._failure is not None:
            raise self._failure
        request_id = next(self._ids) % 2**32
        answer = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        self._transport.write(frames.read_frame(request_id, request.SerializeToString()))
        try:  # (a read whose caller gave up stays waiting: its answer comes in its turn and is dropped)
            return await asyncio.wait_for(asyncio.shield(answer), timeout)
        except asyncio.TimeoutError:
            self._fail(self._broken(f"a read waited over {timeout:g} s for its answer", BookieStatus.TIMEOUT))
            raise self._broken(f"read of ledger {request.ledger_id} entries {request.first_entry_id}.."
                               f"{request.last_entry_id} got no answer within {timeout:g} s",
                               BookieStatus.TIMEOUT) from None

    def close(self) -> None:
        if self._transport is not None and self._failure is None:
            self._transport.write(frames.end(pb.OK))
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        self._fail(self._broken("the client closed its read connection", BookieStatus.CANCELLED))

    # --- the handshake ---------------------------------------------------------------------------------
    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        self._welcome = loop.create_future()
        try:
            tls = {} if self._ssl is None else {"ssl": self._ssl, "server_hostname": self._host,
                                                "ssl_handshake_timeout": CONNECT_TIMEOUT_S}
            self._transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: _Protocol(self), self._host, self._port, **tls), CONNECT_TIMEOUT_S)
        except ssl.SSLError as exc:  # a refused TLS handshake is the bookie's answer, not "unreachable"
            self._fail(self._broken(f"TLS handshake failed: {exc}"))
            raise self._failure from exc
        except (OSError, asyncio.TimeoutError) as exc:
            self._failure = self._broken(f"cannot connect: {exc or 'timed out'}")
            raise FramedReadsUnusable(str(self._failure)) from exc
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._transport.write(frames.hello(frames.VERSION, frames.READS))
        try:
            kind, payload = await asyncio.wait_for(asyncio.shield(self._welcome), CONNECT_TIMEOUT_S)
        except asyncio.TimeoutError as exc:
            self._unusable(f"no WELCOME within {CONNECT_TIMEOUT_S:.0f} s", exc)
        except BookieError as exc:  # the connection broke or sent a frame out of order before any WELCOME
            self._unusable(str(exc), exc)
        if kind is Kind.END:
            status, message = frames.parse_end(payload)
            self._unusable(f"the bookie refused a read connection with {as_status(status).name}: {message}")
        try:
            _, granted, answered_as = frames.parse_welcome(payload, frames.READS)
        except ValueError as exc:
            self._unusable(f"its WELCOME is malformed: {exc}", exc)
        if not granted & frames.READS:
            self._unusable("the bookie does not take reads on its framed port (an earlier version)")
        problem = frames.welcome_problem(answered_as, self.bookie_id)
        if problem is not None:
            self._unusable(problem)
        self._open = True

    def _unusable(self, why: str, cause: BaseException | None = None) -> None:
        """This connection never carried a read: abort it, and tell the caller to take the gRPC port."""
        self._fail(self._broken(why))
        if self._transport is not None:
            self._transport.abort()
        raise FramedReadsUnusable(str(self._failure)) from cause

    # --- what the protocol reports (loop thread) ---------------------------------------------------------
    def _frame(self, kind: Kind, payload) -> None:
        problem = self._rules.check(kind)
        if problem is not None:
            return self._bad_frame(problem)
        if kind is Kind.WELCOME or (kind is Kind.END and not self._open):
            if self._welcome is not None and not self._welcome.done():
                self._welcome.set_result((kind, bytes(payload)))
            return None
        if kind is Kind.END:
            status, message = frames.parse_end(payload)
            self.ended_idle = status == pb.OK
            return self._fail(self._ended(as_status(status), message))
        try:
            request_id, message = frames.split_request_id(payload)
        except ValueError as exc:
            return self._bad_frame(str(exc))
        answer = self._waiting.get(request_id)
        if answer is None or next(iter(self._waiting)) != request_id:
            return self._bad_frame(f"READ_ANSWER {request_id} answers no read waiting in that order")
        try:
            response = decode_read_response(message)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError: the bookie's bytes
            return self._bad_frame(f"READ_ANSWER {request_id} is not a ReadResponse: {exc}")
        del self._waiting[request_id]
        if not answer.done():
            answer.set_result(response)
        return None

    def _bad_frame(self, problem: str) -> None:
        if self._transport is not None:
            self._transport.abort()
        self._fail(BookieError(f"{self._what()}: it sent a frame this client cannot take: {problem}",
                               bookie_id=self.bookie_id, status=BookieStatus.RPC_FAILED))

    def _lost(self, exc: Exception | None) -> None:
        self._fail(self._broken("it closed the connection without an END" if exc is None
                                else f"the connection broke: {exc}"))

    def _fail(self, failure: BookieError) -> None:
        if self._failure is None:
            self._failure = failure
        if self._transport is not None:  # the connection is over: a timed-out one at once, else after what is queued
            if failure.status is BookieStatus.TIMEOUT:
                self._transport.abort()
            else:
                self._transport.close()
        if self._welcome is not None and not self._welcome.done():
            self._welcome.set_exception(self._failure)
            self._welcome.exception()  # retrieved: a handshake that timed out first never looks
        waiting, self._waiting = self._waiting, collections.OrderedDict()
        for answer in waiting.values():
            if not answer.done():
                answer.set_exception(self._failure)
                answer.exception()  # retrieved: a read whose caller gave up never looks

    # --- errors ---------------------------------------------------------------------------------------
    def _what(self) -> str:
        return f"framed read connection to bookie {self.bookie_id} ({self._host}:{self._port})"

    def _broken(self, why: str, status: BookieStatus = BookieStatus.UNAVAILABLE) -> BookieUnavailableError:
        return BookieUnavailableError(f"{self._what()}: {why}", bookie_id=self.bookie_id, status=status)

    def _ended(self, status: BookieStatus, message: str) -> BookieError:
        why = f"the bookie ended it with {status.name}: {message}"
        if status is BookieStatus.OK:  # idle, or stopping: reads waiting (none, normally) meet a closed connection
            return self._broken(why)
        error = error_for_status(status, f"{self._what()}: {why}", bookie_id=self.bookie_id) \
            if status.on_wire else None
        return error if isinstance(error, BookieError) else BookieError(
            f"{self._what()}: {why}", bookie_id=self.bookie_id, status=BookieStatus.RPC_FAILED)


class _Protocol(asyncio.BufferedProtocol):
    """Receives a connection's frames: short ones through one buffer kept for the connection, each frame of
    ``DIRECT_BYTES`` or more straight into a buffer of its own size (the kernel's copy is the only one)."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self._reader = frames.FrameReader(MAX_ANSWER_BYTES)
        self._buffer = memoryview(bytearray(RECEIVE_BUFFER_BYTES))
        self._large: tuple[Kind, memoryview] | None = None  # a frame being received into its own buffer
        self._filled = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            return self._large[1][self._filled:]
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self._large is not None:
            self._filled += nbytes
            kind, payload = self._large
            if self._filled == len(payload):
                self._large = None
                self._connection._frame(kind, payload)
            return
        try:
            received = self._reader.feed(self._buffer[:nbytes])
        except ValueError as problem:
            self._connection._bad_frame(str(problem))
            return
        for kind, payload in received:
            self._connection._frame(kind, payload)
        large = self._reader.large_frame(DIRECT_BYTES, reserve=_granted)
        if large is not None:  # header checked against MAX_ANSWER_BYTES: allocated at its size, filled by recv
            kind, size, arrived, _ = large
            if kind is not Kind.READ_ANSWER:  # refused before its bytes are waited for
                self._connection._bad_frame(f"{kind.name} frame of {size} bytes on a read connection")
                return
            payload = memoryview(bytearray(size))
            payload[:len(arrived)] = arrived
            self._large, self._filled = (kind, payload), len(arrived)

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection._lost(exc)


def _granted(size: int) -> bool:
    """A read connection takes the whole of a large frame's buffer at once: at most ``MAX_ANSWER_BYTES`` (checked
    from its header), one frame per connection at a time, and answers come only to reads this client sent."""
    return True
