"""The client's scheduler: delayed callbacks, cancellation that lets go of the callback, closing."""
from __future__ import annotations

import gc
import logging
import threading
import weakref

from pyspark_ledger.client.entry_reads import LedgerEntry
from pyspark_ledger.client.scheduler import Scheduler

from .conftest import PASSWORD, wait_until


class Callback:
    """A callable that weak references can follow (what a real callback keeps alive, e.g. a range read)."""

    def __init__(self, ran: list, name: str) -> None:
        self.ran, self.name = ran, name

    def __call__(self) -> None:
        self.ran.append(self.name)


def test_callbacks_run_once_in_due_order_and_close_joins_the_thread():
    scheduler, ran = Scheduler(), []
    timers = {name: scheduler.call_later(delay, Callback(ran, name)) for name, delay in (("b", 0.2), ("a", 0.1),
                                                                                         ("c", 0.3))}
    wait_until(lambda: len(ran) == 3, 10)
    # In the order their due times fall (a stall of the test between two calls may reorder those, not the rule)
    assert ran == sorted(timers, key=lambda name: timers[name].due)
    thread = scheduler._thread
    scheduler.close()
    assert thread is not None and not thread.is_alive()


def test_a_cancelled_timer_does_not_run_and_lets_go_of_its_callback_at_once():
    scheduler, ran = Scheduler(), []
    try:
        callback = Callback(ran, "cancelled")
        alive = weakref.ref(callback)
        timer = scheduler.call_later(0.3, callback)
        scheduler.call_later(0.5, Callback(ran, "kept"))
        del callback
        timer.cancel()
        timer.cancel()  # idempotent
        gc.collect()
        assert alive() is None, "the heap still holds the cancelled timer, but not its callback"
        wait_until(lambda: ran == ["kept"], 10)
    finally:
        scheduler.close()


def test_cancelled_timers_that_are_not_due_do_not_pile_up():
    scheduler = Scheduler()
    try:
        for _ in range(10_000):
            scheduler.call_later(3600, lambda: None).cancel()
        assert len(scheduler._heap) <= 512
        live = [scheduler.call_later(3600, lambda: None) for _ in range(1_000)]
        for _ in range(10_000):
            scheduler.call_later(3600, lambda: None).cancel()
        assert 1_000 <= len(scheduler._heap) <= 4_000 and not any(timer.cancelled for timer in live)
    finally:
        scheduler.close()


def test_a_failing_callback_is_logged_and_the_others_still_run(caplog):
    scheduler, ran = Scheduler(), []

    def broken() -> None:
        raise RuntimeError("a bug in a callback")
    try:
        scheduler.call_later(0.05, broken)
        scheduler.call_later(0.1, Callback(ran, "after"))
        wait_until(lambda: ran == ["after"], 10)
        assert "a bug in a callback" in caplog.text
    finally:
        scheduler.close()


def test_after_close_nothing_runs():
    scheduler, ran = Scheduler(), []
    scheduler.call_later(0.2, Callback(ran, "dropped"))
    scheduler.close()
    late = scheduler.call_later(0.0, Callback(ran, "late"))
    assert late.cancelled
    threading.Event().wait(0.4)
    assert ran == []


def live_entries() -> int:
    gc.collect()
    return sum(1 for thing in gc.get_objects() if type(thing) is LedgerEntry)


def test_entries_read_are_released_once_consumed_even_with_speculative_reads_pending(make_client):
    """Each range read arms a speculative-read timer; once the read is answered the timer is cancelled and
    must not keep the answer (its entries and their bodies) alive until it would have fired."""
    client = make_client(speculative_read_delay_s=3600.0, read_batch_entries=4)
    with client.create_ledger(3, 3, 2, password=PASSWORD) as writer:
        for index in range(40):
            writer.append(b"x" * 1000 + bytes([index]))
    reader = client.open_ledger(writer.ledger_id, PASSWORD, recovery=False)
    before = live_entries()
    assert sum(len(entry.data) for entry in reader.read(0, 39, copy=False)) == 40 * 1001
    # The fake network's thread may still hold its last request (one batch of 4) until the next one.
    assert live_entries() - before <= 4, "entries read are kept alive after they were consumed"
