"""Range reads on the framed port (docs/protocol.md W12): the bookie's Read handler over plain TCP or TLS, without gRPC.

A connection whose HELLO asks ``frames.READS`` (and is granted it) is a read connection: the client sends READ frames
(a request id and a ``ReadRequest``), and ``serve_reads`` answers each, in the order they came, with a READ_ANSWER
frame (the same id and the ``ReadResponse``) from the very handler the gRPC port runs (``BookieServicer.Read``: its
checks, keys (K1), its caller's identity for ``--admin-identity`` (K2, the TLS client certificate's names), the
budget of reads served at once ``--max-concurrent-reads``, metrics). gRPC copies every answer into messages and
frames of its own; here an answer's bytes (``read_wire``'s encoding, each body a piece of its own, never joined) go
to the socket as they are, in one ``sendmsg`` (docs/measurements.md, "Range reads without gRPC" and "Read answers
sent as pieces").

What a read connection may cost is bounded before it is read from: the listener caps read connections at
``--max-read-connections`` (one thread each); a client that takes no byte of an answer for ``READ_IDLE_S`` loses
its connection; a READ frame holds at most ``frames.MAX_READ_REQUEST_BYTES``, refused
from its header; the connection is read ``REQUEST_BYTES`` at a time and only between answers, so a client that
sends requests faster than they are answered is held back by TCP, and the bookie holds one answer per connection at
a time. A connection with nothing to answer for ``READ_IDLE_S`` is ended (an END of OK: the client opens a new one
when it reads again). A frame that is not a READ, a READ without its id, or bytes that are not a ``ReadRequest``
end the connection with an END of BAD_REQUEST saying which.
"""
from __future__ import annotations

import socket
from typing import Callable

from google.protobuf.message import DecodeError

from bookie_server.files import IOV_MAX, unwritten
from bookie_server.read_wire import read_response_pieces
from pyspark_ledger.wire import frames
from pyspark_ledger.wire.frames import Kind
from pyspark_ledger.wire.v1 import bookie_pb2 as pb

REQUEST_BYTES = 4096  # what one receive of a read connection takes at most (READ frames are small)
READ_IDLE_S = 60.0  # a read connection with nothing to answer this long is ended
MAX_SEND_BUFFERS = IOV_MAX  # buffers one sendmsg is given: the kernel refuses more


class FramedReadCall:
    """Stands for gRPC's servicer context in ``BookieServicer.Read``: the peer, and the TLS identity (none over
    plaintext)."""

    def __init__(self, peer: str, auth_context: Callable[[], dict]) -> None:
        self._peer = peer
        self._auth_context = auth_context

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> dict:
        return self._auth_context()

    def invocation_metadata(self):
        return ()

    def is_active(self) -> bool:
        return True


def serve_reads(conn, reader: frames.FrameReader, received: list, read: Callable, call: FramedReadCall,
                idle_s: float = READ_IDLE_S) -> tuple[int, str] | None:
    """Answer the READ frames of a read connection past its WELCOME (``received``: frames the handshake's receive
    already held) with ``read`` (``BookieServicer.Read``) until the client's END, a broken rule, or ``idle_s`` with
    no request: then the (status, message) of the END to send. None if the connection broke (nothing to send)."""
    rules = frames.ReadServerRules(past_first=True)
    reader = reader.narrowed(frames.MAX_CONTROL_BYTES)  # READ frames are small: no ADDS of megabytes is buffered
    pending = received
    while True:
        for kind, payload in pending:
            problem = rules.check(kind)
            if problem is not None:
                return pb.BAD_REQUEST, problem
            if kind is Kind.END:
                return pb.OK, ""
            answer = _answer(payload, read, call)
            if isinstance(answer, str):
                return pb.BAD_REQUEST, answer
            try:
                _send(conn, *answer, idle_s)
            except OSError:  # broken, or the client took no bytes of its answer for idle_s: it is over
                return None
        conn.settimeout(idle_s)
        try:
            data = conn.recv(REQUEST_BYTES)
        except socket.timeout:
            return pb.OK, f"the read connection was idle for {idle_s:g} s"
        except OSError:
            return None
        if not data:
            return None
        try:
            pending = reader.feed(data)
        except ValueError as exc:
            return pb.BAD_REQUEST, str(exc)


def _answer(payload: bytes, read: Callable, call: FramedReadCall) -> tuple[bytes, list[bytes]] | str:
    """(the READ_ANSWER's head, its ReadResponse bytes as buffers in order) for one READ payload, or what is wrong
    with the payload."""
    try:
        request_id, message = frames.split_request_id(payload)
    except ValueError as exc:
        return str(exc)
    try:
        request = pb.ReadRequest.FromString(message)
    except DecodeError:
        return f"READ frame {request_id} does not hold a ReadRequest"
    pieces, size = read_response_pieces(read(request, call))
    return frames.read_answer_head(request_id, size), pieces


def _send(conn, head: bytes, pieces: list[bytes], timeout_s: float) -> None:
    """The frame's head then its answer's pieces, not joined (an answer may be megabytes, its bodies pieces of their
    own: the socket's copy is the only one); a socket.timeout if the client takes nothing for ``timeout_s``."""
    conn.settimeout(timeout_s)
    if isinstance(conn, socket.socket):
        buffers = [head, *pieces]
        while buffers:  # most often one call; more for a full send buffer or more pieces than one call takes
            sent = conn.sendmsg(buffers[:MAX_SEND_BUFFERS])
            buffers = unwritten(buffers, sent)
        return
    conn.sendall(head)  # TLS: one record for the answer, not one per piece
    conn.sendall(pieces[0] if len(pieces) == 1 else b"".join(pieces))
