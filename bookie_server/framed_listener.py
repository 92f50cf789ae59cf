"""The framed add stream (docs/protocol.md W11): the bookie's add path over plain TCP, without gRPC.

``FramedListener`` accepts connections on ``--add-port`` and runs each on its own thread: the HELLO within
``HANDSHAKE_TIMEOUT_S``, the WELCOME, then the very same handler the gRPC server runs for an AddStream
(``BookieServicer.AddStream``: the bookie-wide stream budget ``--max-add-streams``, the stream's checks, limits,
back-pressure, draining and answers), fed ADDS frames as ``ReceivedBatch``es by ``_Requests`` and given a
``_FramedCall`` where gRPC gives its servicer context. Its answers leave as ANSWERS frames; the stream ends with
an END frame saying why (``OK`` once the client sent its own END and every add was answered, or once the bookie
ended an idle or draining stream).

What each connection may cost is bounded before it is read from: at most ``--max-add-streams`` connections have a
thread (past it one is refused at once with an END of TOO_MANY_REQUESTS naming the flag), a frame longer than the
gRPC port's receive limit is refused from its header (an END of BAD_REQUEST naming the limit), and so is any frame
out of order (``wire.frames.ServerRules``); what a connection holds of a frame still arriving grows with what was
sent, at most twice it (``FrameReader.take_large``), unless a bookie-wide budget of frames arriving
(``limits.arriving_frames_bytes``: a quarter of ``--max-inflight-bytes``) grants a large frame's size at once:
then the frame is read straight into its buffer, with no copy of what came first. Never is the announced size
allocated beyond that budget. On ``close`` the listening socket closes; once the bookie's add streams drained,
``shut_open_connections`` gives their threads ``END_WAIT_S`` to send their END, then shuts down every connection
still open, which wakes its threads.

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
from dataclasses import dataclass
from typing import Callable

from bookie_server.add_wire import decode_add_batch
from bookie_server.framed_tls import TlsConnection
from bookie_server.limits import Budget, arriving_frames_bytes, grpc_max_message_bytes, refusal_over_budget
from bookie_server.listening import listen_address
from pyspark_ledger.errors import InvalidConfigurationError
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.ack_runs import ASK_FOR_RUNS
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

_log = logging.getLogger(__name__)
HANDSHAKE_TIMEOUT_S = frames.HANDSHAKE_TIMEOUT_S
RECEIVE_BYTES = 256 * 1024  # one recv at most (a larger frame arrives in several)
LARGE_FRAME_BYTES = 64 * 1024  # a frame at least this large is read straight into its own buffer
LISTEN_BACKLOG = 64
END_WAIT_S = 2.0  # at stop, how long drained streams have to send their END before their connections are shut
_STATUS_OF_CODE = {"RESOURCE_EXHAUSTED": pb.TOO_MANY_REQUESTS, "INVALID_ARGUMENT": pb.BAD_REQUEST}


class _Ended(Exception):
    """The handler ended the stream (``_FramedCall.abort``): its END status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class _Opened:
    """A connection past its handshake: its frames so far and what the HELLO asked."""

    reader: frames.FrameReader
    rules: frames.ServerRules
    received: list
    answer_runs: bool


class _FramedCall:
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
        raise _Ended(_STATUS_OF_CODE.get(getattr(code, "name", ""), pb.IO_ERROR), details)

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


class _Requests:
    """The ADDS frames of one connection as ``ReceivedBatch``es, read on the session's reader thread. They end at
    the client's END (its half-close), at a broken connection (which ends the call: ``_FramedCall.end``), or at a
    frame that breaks the rules, whose problem the stream's END then gives."""

    def __init__(self, conn, opened: _Opened, call: _FramedCall, arriving: Budget) -> None:
        self._conn, self._opened, self._call, self._arriving = conn, opened, call, arriving
        self.problem: str | None = None

    def __iter__(self):
        opened = self._opened
        pending, rules, reader = opened.received, opened.rules, opened.reader
        header_first = False  # after a large frame: read the next header alone (``_next_receive``)
        try:
            while True:
                while pending:
                    kind, payload = pending.pop(0)
                    problem = rules.check(kind)
                    if problem is None and kind is Kind.END:
                        return
                    if problem is None:
                        try:
                            batch = decode_add_batch(payload)
                        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError: the client's bytes
                            problem = f"an ADDS frame that is not an AddBatch: {exc}"
                    if problem is not None:
                        self.problem = problem
                        return
                    del payload
                    yield batch
                    del batch
                data = self._conn.recv(_next_receive(header_first, reader.pending))
                if not data:  # gone without its END: the call is over, as a cancelled gRPC call
                    self._call.end()
                    return
                pending.extend(reader.feed(data))
                large = None if pending else reader.take_large(LARGE_FRAME_BYTES, self._arriving.try_take)
                header_first = large is not None or (header_first and reader.pending < frames.HEADER.size)
                if large is not None:
                    kind, payload, have, reserved = large
                    try:
                        view = memoryview(payload)
                        while have < len(payload):
                            received = self._conn.recv_into(view[have:])
                            if not received:
                                self._call.end()
                                return
                            have += received
                        del view
                    finally:
                        if reserved:
                            self._arriving.give_back(len(payload))
                    pending.append((kind, payload))
        except ValueError as exc:  # the framing is broken
            self.problem = str(exc)
        except OSError:
            self._call.end()


def _next_receive(header_first: bool, held: int) -> int:
    """How many bytes the next ``recv`` of a connection asks for, the reader holding ``held``. After a large frame
    (``header_first``) the next header alone, so that when it announces one more large frame, as is likely, none of
    that frame's bytes were copied through the reader before its own buffer takes them (``FrameReader.take_large``).
    Else as much as one ``recv`` takes (``RECEIVE_BYTES``): many small frames per call."""
    return frames.HEADER.size - held if header_first and held < frames.HEADER.size else RECEIVE_BYTES


class FramedListener:
    """The framed add port (see the module docstring)."""

    def __init__(self, servicer, metrics, bookie_id: str, host: str, port: int, max_connections: int,
                 max_frame_bytes: int, tls: ssl.SSLContext | None = None, arriving_bytes: int = 0) -> None:
        self._servicer = servicer
        self._tls = tls
        self._metrics = metrics
        self._bookie_id = bookie_id
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_connections = max_connections
        self._max_frame_bytes = max_frame_bytes
        self._arriving = Budget(arriving_bytes)  # large frames' bytes allocated before half of them arrived
        self._open: set[socket.socket] = set()
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
        and close): their threads see it and end."""
        with self._changed:
            self._changed.wait_for(lambda: not self._open, wait_s)
            open_now = list(self._open)
        for conn in open_now:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

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
        try:
            deadline = frames.handshake_deadline(time.monotonic())  # TLS and HELLO both, within the one timeout
            stream = self._tls_handshake(conn, deadline) if self._tls is not None else conn
            opened = self._handshake(stream, deadline) if stream is not None else None
            if opened is not None:
                self._stream(stream, address, opened)
        except Exception:  # noqa: BLE001 - one bad connection must never take the bookie down
            _log.exception("framed add stream from %s:%s failed", address[0], address[1])
        finally:
            conn.close()
            with self._changed:
                self._open.discard(conn)
                self._changed.notify_all()
            self._slots.release()

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

    def _handshake(self, conn, deadline: float) -> _Opened | None:
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
        except ValueError as exc:
            self._metrics.framed_connection("bad_handshake")
            _end(conn, pb.BAD_REQUEST, f"bad framed add stream handshake: {exc}")
            return None
        except OSError:  # a timeout, or the connection broke
            self._metrics.framed_connection("gone")
            return None
        try:
            conn.sendall(frames.agree(version, flags, self._bookie_id))
        except OSError:
            self._metrics.framed_connection("gone")
            return None
        self._metrics.framed_connection("streamed")
        conn.settimeout(None)
        return _Opened(reader, rules, received, bool(flags & frames.ANSWER_RUNS))

    def _stream(self, conn, address, opened: _Opened) -> None:
        call = _FramedCall(conn, f"framed:{address[0]}:{address[1]}", opened.answer_runs)
        requests = _Requests(conn, opened, call, self._arriving)
        answers = self._servicer.AddStream(iter(requests), call)
        status, message, broken = pb.OK, "", False
        try:
            for answer in answers:
                data = answer.SerializeToString()
                conn.sendall(frames.header(Kind.ANSWERS, len(data)) + data)
        except _Ended as ended:
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
    arriving are allocated up front within ``limits.arriving_frames_bytes``."""
    if config.add_port < 0:
        return None
    max_frame_bytes = grpc_max_message_bytes(config.max_entry_size, config.max_batch_bytes)
    try:
        return FramedListener(servicer, metrics, bookie_id, config.host, config.add_port, config.max_add_streams,
                              max_frame_bytes, config.tls.ssl_context() if config.tls is not None else None,
                              arriving_frames_bytes(config.max_inflight_bytes, max_frame_bytes))
    except OSError as exc:
        raise InvalidConfigurationError(
            f"cannot take framed adds on {listen_address(config.host, config.add_port)}: {exc}; "
            "pick another --add-port (0 = any free port, -1 = off)") from exc


def _end(conn, status: int, message: str) -> None:
    try:
        conn.sendall(frames.end(status, message))
    except OSError:
        pass
