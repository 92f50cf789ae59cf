"""Delayed callbacks of one LedgerClient on one owned thread (add timeouts, speculative reads).

``call_later(delay, fn)`` returns a handle whose ``cancel()`` is idempotent.
Callbacks run one at a time on the scheduler thread and must be quick; an
exception in one is logged and does not stop the others. ``close()`` drops
what is still scheduled and joins the thread.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)


class Timer:
    """A scheduled callback; ``cancel()`` keeps it from running (if it has not yet)."""

    __slots__ = ("due", "fn", "cancelled")

    def __init__(self, due: float, fn: Callable[[], None]) -> None:
        self.due = due
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    """A heap of timers served by one thread, started lazily and joined by ``close()``."""

    def __init__(self, name: str = "ledger-client-scheduler") -> None:
        self._name = name
        self._heap: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        """Run ``fn`` on the scheduler thread after ``delay`` seconds (not if closed first)."""
        timer = Timer(time.monotonic() + max(0.0, delay), fn)
        with self._cond:
            if self._closed:
                timer.cancelled = True
                return timer
            heapq.heappush(self._heap, (timer.due, next(self._order), timer))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            if self._heap[0][2] is timer:
                self._cond.notify()
        return timer

    def close(self) -> None:
        """Drop pending timers and join the thread; idempotent."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            timer = self._next_due()
            if timer is None:
                return
            try:
                timer.fn()
            except Exception:  # noqa: BLE001 - one bad callback must not stop the others
                log.exception("scheduled callback %r failed", timer.fn)

    def _next_due(self) -> Timer | None:
        with self._cond:
            while not self._closed:
                if not self._heap:
                    self._cond.wait()
                    continue
                due, _, timer = self._heap[0]
                if timer.cancelled:
                    heapq.heappop(self._heap)
                    continue
                wait = due - time.monotonic()
                if wait <= 0:
                    heapq.heappop(self._heap)
                    return timer
                self._cond.wait(wait)
            return None
