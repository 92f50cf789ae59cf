"""The answers of one plaintext framed add stream, sent by the first thread that has them (docs/protocol.md W11).

On gRPC the journal thread queues a durable batch's statuses and the stream's handler thread wakes to answer
them: two thread hand-offs between an add's arrival and its answer. On a plaintext framed connection the
journal thread may send the answer itself (``offer``), without waiting for anything:

* it only tries the outbox's lock -- if the handler thread holds it (it is sending, perhaps blocked on a client
  that reads slowly), the journal thread queues the answer as before and goes on;
* it sends without blocking (``sender.send_now``); what the socket did not take stays in the outbox, the handler
  is woken to send it (blocking), and until it has, new answers are queued, so what waits here is at most one
  offer's bytes and a client that reads nothing still holds the stream back as on gRPC;
* everything is taken from the stream's queue under the lock and sent in that order, by either thread, so
  answers leave in the order the journal made them durable.

If turning the statuses into answers fails on the journal thread (a bug), the error is kept and raised on the
handler thread, which ends the stream with it as it would have on its own: the journal thread goes on.

The handler thread waits for ``ready`` (set by every ``notify``: something was queued, or bytes were left),
then ``send``s whatever is queued, blocking. ``sender`` is the connection: ``answer_bytes(message)`` (the
ANSWERS frame), ``send_now(data)`` (bytes taken; BlockingIOError when none) and ``send_all(data)``.
"""
from __future__ import annotations

import threading
from typing import Callable, Protocol


class AnswerSender(Protocol):
    def answer_bytes(self, message) -> bytes: ...

    def send_now(self, data: bytes) -> int: ...

    def send_all(self, data: bytes) -> None: ...


class AnswerOutbox:
    """See the module docstring. ``build(items)`` turns queued items into the messages answering them."""

    def __init__(self, sender: AnswerSender, take: Callable[[], list], build: Callable[[list], list]) -> None:
        self._sender = sender
        self._take = take  # everything queued so far, in order (called under the lock)
        self._build = build
        self._lock = threading.Lock()
        self._unsent = b""  # bytes the socket did not take without blocking, sent first by the handler
        self._ready = threading.Event()
        self.broken = False  # a send failed: the connection is gone, the call ends through its reader
        self._failure: Exception | None = None  # building answers failed on the journal thread: the handler raises it

    @property
    def holding(self) -> bool:
        """Bytes wait here for the handler."""
        return bool(self._unsent)

    def notify(self) -> None:
        self._ready.set()

    def wait(self, timeout: float | None) -> bool:
        return self._ready.wait(timeout)

    def offer(self, item) -> bool:
        """On the journal thread: answer ``item`` (and whatever was queued before it) now, if that needs no
        waiting; False when the caller must queue it instead."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._unsent or self.broken:
                return False
            items = self._take()
            items.append(item)
            try:
                data = self._bytes(items)
            except Exception as exc:  # noqa: BLE001 - a bug: it ends this stream (on its thread), never the journal
                self._failure = exc
                self._ready.set()
                return True
            if not data:
                return True
            try:
                sent = self._sender.send_now(data)
            except BlockingIOError:
                sent = 0
            except OSError:
                self.broken = True
                return True
            if sent < len(data):
                self._unsent = data[sent:]
                self._ready.set()
            return True
        finally:
            self._lock.release()

    def send(self) -> None:
        """On the handler thread: send what waits here, then everything queued, blocking (OSError if the
        connection broke)."""
        with self._lock:
            self._ready.clear()
            if self._failure is not None:
                raise self._failure
            data = self._unsent + self._bytes(self._take())
            self._unsent = b""
            if data and not self.broken:
                try:
                    self._sender.send_all(data)
                except OSError:
                    self.broken = True
                    raise

    def _bytes(self, items: list) -> bytes:
        return b"".join(map(self._sender.answer_bytes, self._build(items)))
