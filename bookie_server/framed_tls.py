"""TLS on the framed add port (docs/protocol.md W11): a connection the listener's threads use as they use a socket.

A framed add stream reads on one thread (the session's reader) and writes on another (the answers), and an
OpenSSL connection must not be used by two threads at once. So ``TlsConnection`` keeps the TLS state in an
``ssl.SSLObject`` over two memory buffers and does the socket's reads and writes itself: every use of the
``SSLObject`` holds a short lock (never while waiting on the network), and the encrypted bytes it produces leave
in the order it produced them (taking them out of the outgoing buffer and sending them is one step, under a
send lock). The handshake runs alone, on the connection's thread, before either side is started, within the
deadline it is given.

``auth_context`` gives what gRPC's servicer context gives for a TLS call, for ``security.tls.peer_names``: the
common name and subject alternative names of a client certificate the handshake verified (mutual TLS), and
nothing else -- without a verified certificate the caller has no identity.
"""
from __future__ import annotations

import socket
import ssl
import threading
import time

RAW_BYTES = 256 * 1024  # one read of the socket at most: the connection's buffer of encrypted bytes


class TlsConnection:
    """A server-side TLS connection over an accepted socket (see the module docstring)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self._sock = sock
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._lock = threading.Lock()  # every use of the SSLObject
        self._send_lock = threading.Lock()  # taking encrypted bytes out and sending them, as one step (then _lock)
        self._raw = memoryview(bytearray(RAW_BYTES))  # encrypted bytes read into again and again (one reader at a time:
        # the handshake, then the stream's reader thread), never a new buffer per read (``framed_stream``)

    # --- the handshake (one thread, before the stream starts) -----------------------------
    def handshake(self, timeout_s: float) -> None:
        """Complete the TLS handshake within ``timeout_s``; OSError (ssl.SSLError, a timeout) if it fails."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._tls.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout(f"no TLS handshake within {timeout_s:.0f} s") from None
                self._sock.settimeout(left)
                count = self._sock.recv_into(self._raw)
                if not count:
                    raise ConnectionResetError("the client closed the connection during the TLS handshake")
                self._incoming.write(self._raw[:count])

    def auth_context(self) -> dict:
        """The verified client certificate's names, as gRPC's ``auth_context`` gives them; {} without one."""
        certificate = self._tls.getpeercert()
        if not certificate:
            return {}
        common = [value.encode() for rdn in certificate.get("subject", ()) for key, value in rdn
                  if key == "commonName"]
        alternative = [value.encode() for _, value in certificate.get("subjectAltName", ())]
        return {"transport_security_type": [b"ssl"], "security_level": [b"TSI_PRIVACY_AND_INTEGRITY"],
                "x509_common_name": common, "x509_subject_alternative_name": alternative}

    # --- what the listener's threads use ---------------------------------------------------
    def recv(self, size: int) -> bytes:
        """Decrypted bytes (at most ``size``; one TLS record's at most); b"" once the client closed."""
        return self._read(lambda: self._tls.read(size), b"")

    def recv_into(self, view: memoryview) -> int:
        """Decrypted bytes into ``view``: how many; 0 once the client closed the connection."""
        return self._read(lambda: self._tls.read(len(view), view), 0)

    def _read(self, read, closed):
        while True:
            with self._lock:
                try:
                    result = read()
                except ssl.SSLWantReadError:
                    result = None
                except ssl.SSLZeroReturnError:  # the client's close_notify
                    result = closed
                produced = self._outgoing.pending
            if produced:  # e.g. a TLS 1.3 key update answered by the read
                self._flush()
            if result is not None:
                return result
            count = self._sock.recv_into(self._raw)
            if not count:
                return closed
            with self._lock:
                self._incoming.write(self._raw[:count])

    def sendall(self, data: bytes) -> None:
        with self._send_lock:
            with self._lock:
                self._tls.write(data)
                encrypted = self._outgoing.read()
            self._sock.sendall(encrypted)

    def send(self, data: bytes) -> int:
        self.sendall(data)
        return len(data)

    def _flush(self) -> None:
        with self._send_lock:
            with self._lock:
                encrypted = self._outgoing.read()
            if encrypted:
                self._sock.sendall(encrypted)

    # --- the socket underneath -----------------------------------------------------------
    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

    def setsockopt(self, *args) -> None:
        self._sock.setsockopt(*args)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()
