"""The framed port (docs/protocol.md W11, W12): the bookie's add streams and range reads over TCP, without gRPC.

``FramedListener`` accepts connections on ``--add-port`` and runs each on its own thread: the HELLO within
``HANDSHAKE_TIMEOUT_S``, the WELCOME, then the very same handler the gRPC server runs for an AddStream
(``BookieServicer.AddStream``: the bookie-wide stream budget ``--max-add-streams``, the stream's checks, limits,
back-pressure, draining and answers), fed ADDS frames as ``ReceivedBatch``es by ``framed_stream.FramedRequests``
and given a ``framed_stream.FramedServerCall`` where gRPC gives its servicer context. Its answers leave as ANSWERS
frames; the stream ends with an END frame saying why (``OK`` once the client sent its own END and every add was
answered, or once the bookie ended an idle or draining stream).

What each connection may cost is bounded before it is read from: at most ``--max-add-streams`` connections have a
thread (past it one is refused at once with an END of TOO_MANY_REQUESTS naming the flag), a frame longer than the
gRPC port's receive limit is refused from its header (an END of BAD_REQUEST naming the limit), and so is any frame
out of order (``wire.frames.ServerRules``); what a connection holds of a frame still arriving grows with what was
sent, never the announced size beyond the bookie-wide budget of frames arriving (``framed_stream``). On ``close``
the listening socket closes; once the bookie's add streams drained, ``shut_open_connections`` gives their threads
``END_WAIT_S`` to send their END, then shuts down every connection still open, which wakes its threads.

A connection whose HELLO asks ``frames.READS`` is a read connection (``framed_reads``): past its HELLO it gives its
add-stream slot back and takes one of ``--max-read-connections`` instead (none left: an END of TOO_MANY_REQUESTS
naming that flag, before any WELCOME), and its READ frames are answered by the gRPC port's Read handler.

A bookie with TLS (``--tls-cert``) serves the port with the same TLS as its gRPC port (``framed_tls``: the same
certificate, and with ``--tls-client-ca`` the same required client certificate, whose names are the caller's
identity for ``--admin-identity``): the TLS handshake comes first, and it and the HELLO must both be done within
``HANDSHAKE_TIMEOUT_S`` of the connection's start. Over TLS a connection past ``--max-add-streams`` is closed at
once, unanswered (an END before the handshake would not be TLS).
"""
from __future__ import annotations

import logging
import socket
import ssl
import threading
import time

from bookie_server.framed_reads import READ_IDLE_S, FramedReadCall, serve_reads
from bookie_server.framed_stream import RECEIVE_BYTES, Ended, FramedRequests, FramedServerCall, Opened
from bookie_server.framed_tls import TlsConnection
from bookie_server.limits import Budget, arriving_frames_bytes, grpc_max_message_bytes, refusal_over_budget
from bookie_server.listening import listen_address
from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

_log = logging.getLogger(__name__)
HANDSHAKE_TIMEOUT_S = frames.HANDSHAKE_TIMEOUT_S
LISTEN_BACKLOG = 64
END_WAIT_S = 2.0  # at stop, how long drained streams have to send their END before their connections are shut


class FramedListener:
    """The framed add port (see the module docstring)."""

    def __init__(self, servicer, metrics, bookie_id: str, host: str, port: int, max_connections: int,
                 max_frame_bytes: int, tls: ssl.SSLContext | None = None, arriving_bytes: int = 0,
                 max_merged_adds: int = 1, max_merged_bytes: int = 0, max_read_connections: int = 0,
                 read_idle_s: float = READ_IDLE_S) -> None:
        self._servicer = servicer
        self._tls = tls
        self._metrics = metrics
        self._bookie_id = bookie_id
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_connections = max_connections
        self._read_slots = threading.BoundedSemaphore(max_read_connections) if max_read_connections > 0 else None
        self._max_read_connections = max_read_connections
        self._read_idle_s = read_idle_s
        self._max_frame_bytes = max_frame_bytes
        self._arriving = Budget(arriving_bytes)  # large frames' bytes allocated before half of them arrived
        # frames received together are handed on as one batch of at most this many adds and bytes
        self._max_merged_adds, self._max_merged_bytes = max_merged_adds, max_merged_bytes
        self._open: set[socket.socket] = set()
        self._reading: set[socket.socket] = set()  # the open read connections (their sockets), shut first at stop
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a connection ended
        self._closed = False
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
        self.port = self._socket.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name=f"framed-add-listener {self.port}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """No more connections (the streams still open go on until ``shut_open_connections``)."""
        with self._lock:
            self._closed = True
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()
        if self._thread.is_alive():
            self._thread.join(5.0)

    def shut_open_connections(self, wait_s: float = END_WAIT_S) -> None:
        """Shut down every connection still open after ``wait_s`` (time for drained streams to send their END
        and close): their threads see it and end. Read connections are shut for reading at once (nothing of
        theirs drains: an answer being sent is still sent, then the connection ends)."""
        with self._changed:
            reading = list(self._reading)
        _shut(reading, socket.SHUT_RD)
        with self._changed:
            self._changed.wait_for(lambda: not self._open, wait_s)
            open_now = list(self._open)
        _shut(open_now, socket.SHUT_RDWR)

    def _accept(self) -> None:
        while True:
            try:
                conn, address = self._socket.accept()
            except OSError:
                return  # closed
            if not self._slots.acquire(blocking=False):
                self._metrics.framed_connection("refused")
                self._metrics.call_refused("add_stream")
                self._refuse_at_once(conn)
                continue
            with self._lock:
                if self._closed:
                    self._slots.release()
                    conn.close()
                    return
                self._open.add(conn)
            threading.Thread(target=self._serve, args=(conn, address), daemon=True,
                             name=f"framed-add-stream {address[0]}:{address[1]}").start()

    def _refuse_at_once(self, conn: socket.socket) -> None:
        if self._tls is not None:  # an END before the TLS handshake would not be TLS: the connection just ends
            conn.close()
            return
        try:
            conn.setblocking(False)  # a short frame into an empty socket buffer: it never waits
            conn.send(frames.end(pb.TOO_MANY_REQUESTS, refusal_over_budget(
                "framed add connections", self._max_connections, "--max-add-streams")))
        except OSError:
            pass
        finally:
            conn.close()

    def _serve(self, conn: socket.socket, address) -> None:
        slot = self._slots  # the add-stream slot taken at accept; a read connection trades it for a read slot
        try:
            deadline = frames.handshake_deadline(time.monotonic())  # TLS and HELLO both, within the one timeout
            stream = self._tls_handshake(conn, deadline) if self._tls is not None else conn
            opened = self._handshake(stream, deadline) if stream is not None else None
            if opened is not None and opened.reads:
                slot = self._read_slot(stream)
                if slot is not None:
                    self._slots.release()
                    self._reads(stream, address, opened, conn)
                else:
                    slot = self._slots
            elif opened is not None:
                self._stream(stream, address, opened)
        except Exception:  # noqa: BLE001 - one bad connection must never take the bookie down
            _log.exception("framed connection from %s:%s failed", address[0], address[1])
        finally:
            conn.close()
            with self._changed:
                self._open.discard(conn)
                self._changed.notify_all()
            slot.release()

    def _read_slot(self, conn) -> threading.BoundedSemaphore | None:
        """One of ``--max-read-connections``, taken; None (the client told so in an END) when none is left."""
        if self._read_slots is not None and self._read_slots.acquire(blocking=False):
            return self._read_slots
        self._metrics.framed_connection("refused")
        self._metrics.call_refused("read_connection")
        _end(conn, pb.TOO_MANY_REQUESTS, refusal_over_budget("framed read connections", self._max_read_connections,
                                                             "--max-read-connections"))
        return None

    def _reads(self, conn, address, opened: Opened, raw: socket.socket) -> None:
        """A read connection past its HELLO (``raw``: its socket): the WELCOME, then its reads (``framed_reads``),
        then an END if it did not break."""
        try:
            conn.sendall(opened.welcome)
        except OSError:
            self._metrics.framed_connection("gone")
            return
        self._metrics.framed_connection("reads")
        auth = conn.auth_context if isinstance(conn, TlsConnection) else dict  # plaintext: no identity
        call = FramedReadCall(f"framed:{address[0]}:{address[1]}", auth)
        with self._changed:
            self._reading.add(raw)
        try:
            ended = serve_reads(conn, opened.reader, opened.received, self._servicer.Read, call, self._read_idle_s)
        finally:
            with self._changed:
                self._reading.discard(raw)
        if ended is not None:
            _end(conn, *ended)

    def _tls_handshake(self, conn: socket.socket, deadline: float) -> TlsConnection | None:
        """The TLS handshake (by ``deadline``); None if it failed (counted: ``bad_handshake`` when
        the client's bytes or certificate were refused, ``gone`` when it left or was silent)."""
        connection = TlsConnection(conn, self._tls)
        try:
            connection.handshake(deadline - time.monotonic())
        except ssl.SSLError as exc:
            self._metrics.framed_connection("bad_handshake")
            _log.info("framed add stream: TLS handshake refused: %s", exc)
            return None
        except OSError:
            self._metrics.framed_connection("gone")
            return None
        return connection

    def _handshake(self, conn, deadline: float) -> Opened | None:
        """The HELLO (by ``deadline``) and the WELCOME; None if the client left or broke the rules (then told so
        in an END)."""
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        reader, rules = frames.FrameReader(self._max_frame_bytes), frames.ServerRules()
        received: list = []
        try:
            while not received:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout("no HELLO in time")
                conn.settimeout(left)
                data = conn.recv(RECEIVE_BYTES)
                if not data:
                    self._metrics.framed_connection("gone")
                    return None
                received = reader.feed(data)
            kind, payload = received.pop(0)
            problem = rules.check(kind)
            if problem is None and kind is Kind.END:
                self._metrics.framed_connection("gone")
                return None
            if problem is not None:
                raise ValueError(problem)
            version, flags = frames.parse_hello(payload)
            reads = bool(flags & frames.READS)
        except ValueError as exc:
            self._metrics.framed_connection("bad_handshake")
            _end(conn, pb.BAD_REQUEST, f"bad framed add stream handshake: {exc}")
            return None
        except OSError:  # a timeout, or the connection broke
            self._metrics.framed_connection("gone")
            return None
        welcome = frames.agree(version, flags, self._bookie_id)
        conn.settimeout(None)
        if reads:  # its WELCOME waits for a read slot (``_reads``)
            return Opened(reader, rules, received, False, True, welcome)
        try:
            conn.sendall(welcome)
        except OSError:
            self._metrics.framed_connection("gone")
            return None
        self._metrics.framed_connection("streamed")
        return Opened(reader, rules, received, bool(flags & frames.ANSWER_RUNS))

    def _stream(self, conn, address, opened: Opened) -> None:
        call = FramedServerCall(conn, f"framed:{address[0]}:{address[1]}", opened.answer_runs)
        requests = FramedRequests(conn, opened, call, self._arriving, self._max_merged_adds, self._max_merged_bytes)
        answers = self._servicer.AddStream(iter(requests), call)
        status, message, broken = pb.OK, "", False
        try:
            for answer in answers:
                data = answer.SerializeToString()
                conn.sendall(frames.header(Kind.ANSWERS, len(data)) + data)
        except Ended as ended:
            status, message = ended.status, ended.message
        except OSError:  # the client is gone: the call is over
            broken = True
        finally:
            call.stop_reading()
            if broken:
                call.end()
            answers.close()  # a handler left mid-stream runs its own ends now (budget, session, reader)
        if broken:
            return
        if requests.problem is not None:
            status, message = pb.BAD_REQUEST, requests.problem
        _end(conn, status, message)
        call.end()


def open_framed_listener(config, servicer, metrics, bookie_id: str) -> FramedListener | None:
    """The listener of ``config.add_port`` (None when it is off, -1), bound but not started; a port that cannot be
    bound is an InvalidConfigurationError naming ``--add-port``. Frames may be as long as the gRPC port's receive
    limit (``limits.grpc_max_message_bytes``); connections are capped at ``--max-add-streams``; large frames
    arriving are allocated up front within ``limits.arriving_frames_bytes``; frames of small adds received together
    are handed on as one batch of at most ``--max-batch-adds`` adds and ``--max-batch-bytes`` bytes
    (``framed_stream.FramedRequests``); read connections are capped at ``--max-read-connections``."""
    if config.add_port < 0:
        return None
    max_frame_bytes = grpc_max_message_bytes(config.max_entry_size, config.max_batch_bytes)
    try:
        return FramedListener(servicer, metrics, bookie_id, config.host, config.add_port, config.max_add_streams,
                              max_frame_bytes, config.tls.ssl_context() if config.tls is not None else None,
                              arriving_frames_bytes(config.max_inflight_bytes, max_frame_bytes), config.max_batch_adds,
                              config.max_batch_bytes, config.max_read_connections)
    except OSError as exc:
        raise InvalidConfigurationError(
            f"cannot take framed adds on {listen_address(config.host, config.add_port)}: {exc}; "
            "pick another --add-port (0 = any free port, -1 = off)") from exc


def _shut(connections: list[socket.socket], how: int) -> None:
    for conn in connections:
        try:
            conn.shutdown(how)
        except OSError:
            pass


def _end(conn, status: int, message: str) -> None:
    try:
        conn.sendall(frames.end(status, message))
    except OSError:
        pass
