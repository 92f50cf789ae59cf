"""AddOutbox: adds queued by writers reach their streams in batches, in order, on the network loop."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.client.add_outbox import AddOutbox
from pyspark_ledger.client.io_loop import IoLoop
from pyspark_ledger.errors import BookieUnavailableError
from pyspark_ledger.status import BookieStatus
from tests.client.conftest import wait_until


class Listener:
    def __init__(self):
        self.failures = []

    def on_add_results(self, bookie_id, results):
        raise AssertionError("not used here")

    def on_add_failure(self, bookie_id, keys, error):
        self.failures.append((bookie_id, keys, error.status))


@pytest.fixture
def loop():
    io_loop = IoLoop("test-outbox")
    try:
        yield io_loop
    finally:
        io_loop.close()


def blocked(loop):
    """Hold the loop thread until the returned event is set (so puts pile up before one flush)."""
    gate, holding = threading.Event(), threading.Event()

    def hold():
        holding.set()
        gate.wait(10)
    loop.call_soon(hold)
    assert holding.wait(10)
    return gate


def test_puts_before_a_flush_become_one_send_per_bookie_ledger_and_listener_in_order(loop):
    sent, on_loop = [], []
    outbox = AddOutbox(loop, lambda b, l, adds, who: (sent.append((b, l, list(adds), who)),
                                                       on_loop.append(loop.in_loop_thread())))
    first, second = Listener(), Listener()
    gate = blocked(loop)
    for entry in range(4):
        for bookie in ("b1", "b2", "b3"):
            outbox.put(bookie, 7, [(entry, b"e%d" % entry)], first)
    outbox.put("b1", 8, [(0, b"x")], second)
    gate.set()
    wait_until(lambda: len(sent) == 4, what="the flush")
    frames = [(entry, b"e%d" % entry) for entry in range(4)]
    assert sent == [("b1", 7, frames, first), ("b2", 7, frames, first), ("b3", 7, frames, first),
                    ("b1", 8, [(0, b"x")], second)]
    assert all(on_loop), "streams are handed their adds on the network loop"
    outbox.put("b1", 7, [(4, b"e4")], first)  # a later put is flushed again
    wait_until(lambda: len(sent) == 5, what="the second flush")


def test_a_bookie_that_cannot_be_reached_fails_its_adds_through_the_listener(loop):
    def refuse(bookie_id, ledger_id, adds, listener):
        raise BookieUnavailableError(f"bookie {bookie_id} is not registered", bookie_id=bookie_id,
                                     status=BookieStatus.UNAVAILABLE)
    outbox = AddOutbox(loop, refuse)
    listener = Listener()
    outbox.put("gone", 3, [(5, b"a"), (6, b"b")], listener)
    wait_until(lambda: listener.failures, what="the failure")
    assert listener.failures == [("gone", [(3, 5), (3, 6)], BookieStatus.UNAVAILABLE)]


def test_close_fails_what_is_queued_and_refuses_more(loop):
    sent = []
    outbox = AddOutbox(loop, lambda *args: sent.append(args))
    listener = Listener()
    gate = blocked(loop)
    outbox.put("b1", 1, [(0, b"a")], listener)
    outbox.close()
    gate.set()
    assert listener.failures == [("b1", [(1, 0)], BookieStatus.CLOSED)]
    with pytest.raises(BookieUnavailableError, match="closed"):
        outbox.put("b1", 1, [(1, b"b")], listener)
    ran = threading.Event()
    loop.call_soon(ran.set)
    assert ran.wait(10) and sent == [], "nothing queued before the close reached a stream"
