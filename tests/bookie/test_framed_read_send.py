"""A framed read answer leaves as the pieces ``read_wire`` encoded (bookie_server/framed_reads.py ``_send``): in
order and whole when the socket takes them a little at a time, when there are more pieces than one ``sendmsg``
takes, and joined into one send over TLS."""
from __future__ import annotations

import os
import socket
import threading

from bookie_server import framed_reads


def received_through(pieces: list[bytes], head: bytes = b"HEAD", send_buffer: int | None = None,
                     socket_class: type = socket.socket) -> bytes:
    """What a peer receives of ``_send(head, pieces)`` over a socket pair (the sending end a ``socket_class``), read
    in small steps by a thread of its own."""
    first, receiver = socket.socketpair()
    sender = socket_class(fileno=first.detach())
    if send_buffer:
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    total = len(head) + sum(map(len, pieces))
    got = bytearray()

    def receive():
        while len(got) < total:
            data = receiver.recv(7919)
            if not data:
                return
            got.extend(data)
    reading = threading.Thread(target=receive, daemon=True)
    reading.start()
    try:
        framed_reads._send(sender, head, pieces, 10.0)
        reading.join(10)
        assert not reading.is_alive()
    finally:
        sender.close()
        receiver.close()
    return bytes(got)


def test_pieces_arrive_whole_and_in_order_through_partial_sends():
    pieces = [os.urandom(size) for size in (1, 3, 1 << 20, 5, 2 << 20, 0, 17)]
    assert received_through(pieces, send_buffer=4096) == b"HEAD" + b"".join(pieces)


def test_more_pieces_than_one_sendmsg_takes():
    calls = []

    class Counting(socket.socket):
        def sendmsg(self, buffers, *args):
            calls.append(len(buffers))
            return super().sendmsg(buffers, *args)
    pieces = [bytes([index % 251]) * (1 + index % 9) for index in range(3 * framed_reads.MAX_SEND_BUFFERS + 5)]
    assert received_through(pieces, socket_class=Counting) == b"HEAD" + b"".join(pieces)
    assert len(calls) >= 4 and max(calls) <= framed_reads.MAX_SEND_BUFFERS


def test_over_tls_the_answer_is_one_send_after_its_head():
    class Tls:  # not a socket.socket: the TLS connection's sendall
        def __init__(self):
            self.sent = []

        def settimeout(self, timeout):
            pass

        def sendall(self, data):
            self.sent.append(bytes(data))
    conn = Tls()
    framed_reads._send(conn, b"HEAD", [b"a", b"bb", b"ccc"], 1.0)
    assert conn.sent == [b"HEAD", b"abbccc"]
