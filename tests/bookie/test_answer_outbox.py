"""The answer outbox of a plaintext framed stream (bookie_server/answer_outbox.py, docs/protocol.md W11): the journal
thread answers at once when that needs no waiting, never blocks, never lets answers overtake each other, and never
piles up more than one offer's bytes for a client that reads slowly."""
from __future__ import annotations

import queue
import threading

import pytest

from bookie_server.answer_outbox import AnswerOutbox


class Sender:
    """A connection whose socket takes ``room`` bytes without blocking (None: everything)."""

    def __init__(self, room: int | None = None, broken: bool = False) -> None:
        self.room = room
        self.broken = broken
        self.wire = b""
        self.blocking_sends = 0

    def answer_bytes(self, message) -> bytes:
        return b"<" + message + b">"

    def send_now(self, data: bytes) -> int:
        if self.broken:
            raise ConnectionResetError("gone")
        taken = len(data) if self.room is None else min(self.room, len(data))
        if taken == 0:
            raise BlockingIOError
        if self.room is not None:
            self.room -= taken
        self.wire += data[:taken]
        return taken

    def send_all(self, data: bytes) -> None:
        if self.broken:
            raise ConnectionResetError("gone")
        self.blocking_sends += 1
        self.wire += data


def outbox(sender: Sender) -> tuple[AnswerOutbox, queue.SimpleQueue]:
    queued: queue.SimpleQueue = queue.SimpleQueue()

    def take() -> list:
        items = []
        while not queued.empty():
            items.append(queued.get_nowait())
        return items
    return AnswerOutbox(sender, take, lambda items: list(items)), queued


def test_an_offer_is_sent_at_once_after_whatever_was_queued_before_it():
    sender = Sender()
    box, queued = outbox(sender)
    queued.put(b"1")
    assert box.offer(b"2")
    assert sender.wire == b"<1><2>" and not box.holding and not box.wait(0)


def test_what_the_socket_did_not_take_waits_for_the_handler_and_later_offers_are_queued_behind_it():
    sender = Sender(room=5)
    box, queued = outbox(sender)
    assert box.offer(b"1")  # "<1>" fits
    assert box.offer(b"2")  # 2 bytes of "<2>" fit: the rest waits here, and the handler is woken
    assert sender.wire == b"<1><2" and box.holding and box.wait(0)
    assert box.offer(b"3") is False  # bytes wait: a new answer may not pass them (the caller queues it)
    queued.put(b"3")
    box.send()  # the handler: the held bytes first, then the queue, blocking
    assert sender.wire == b"<1><2><3>" and not box.holding and sender.blocking_sends == 1
    assert not box.wait(0)
    assert box.offer(b"4")  # the socket is full now: all of "<4>" waits for the handler
    assert box.holding and sender.wire == b"<1><2><3>"
    box.send()
    assert sender.wire == b"<1><2><3><4>"


def test_an_offer_while_the_handler_sends_is_left_to_the_queue():
    sender = Sender()
    box, _ = outbox(sender)
    taken = threading.Event()
    release = threading.Event()

    def slow_take() -> list:
        taken.set()
        release.wait(10)
        return [b"1"]
    box._take = slow_take
    acquires: list[tuple] = []
    lock = box._lock

    class Recorded:  # the outbox's own lock, with every acquire's arguments written down
        def acquire(self, *args, **kwargs):
            acquires.append((threading.current_thread().name, args, kwargs))
            return lock.acquire(*args, **kwargs)

        def release(self):
            lock.release()

        def __enter__(self):
            return self.acquire()

        def __exit__(self, *exc):
            self.release()
    box._lock = Recorded()
    handler = threading.Thread(target=box.send, name="handler")
    handler.start()
    try:
        assert taken.wait(10)
        assert box.offer(b"2") is False  # the journal thread never waits for the lock
        assert [(args, kwargs) for name, args, kwargs in acquires if name != "handler"] == [
            ((), {"blocking": False})]  # one try, no wait and no timeout
    finally:
        release.set()
        handler.join(10)
    assert sender.wire == b"<1>"


def test_a_broken_connection_is_remembered_and_the_handler_hears_of_it():
    sender = Sender(broken=True)
    box, queued = outbox(sender)
    assert box.offer(b"1") and box.broken  # dropped: the connection is gone, its reader ends the call
    assert box.offer(b"2") is False
    queued.put(b"3")
    box.send()  # nothing more is sent on a broken connection
    healthy, _ = outbox(Sender(broken=True))
    healthy._take = lambda: [b"x"]
    with pytest.raises(OSError):
        healthy.send()
    assert healthy.broken


def test_answers_that_cannot_be_built_end_the_stream_on_its_own_thread_never_the_journal_s():
    sender = Sender()

    def build(items):
        raise RuntimeError("a bug")
    box = AnswerOutbox(sender, lambda: [], build)
    assert box.offer(b"1")  # the journal thread returns: the error waits for the stream's thread
    assert box.wait(0)
    with pytest.raises(RuntimeError, match="a bug"):
        box.send()
    assert sender.wire == b""
