"""A socket wrapper for tests of the framed port's readers: which buffers they read into and which ``recv``s
they made (each ``recv`` is a new buffer)."""
from __future__ import annotations

import socket


class RecordingSocket:
    """Notes the buffer of every ``recv_into`` and the arguments of every ``recv``; passes everything on."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.buffers: list = []
        self.recv_args: list = []

    @property
    def recv_calls(self) -> int:
        return len(self.recv_args)

    def recv_into(self, view, *args):
        self.buffers.append(view.obj)
        return self._sock.recv_into(view, *args)

    def recv(self, *args):
        self.recv_args.append(args)
        return self._sock.recv(*args)

    def __getattr__(self, name):
        return getattr(self._sock, name)
