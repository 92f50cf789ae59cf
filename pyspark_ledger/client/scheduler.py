"""Delayed callbacks of one LedgerClient on one owned thread (add timeouts, speculative reads).

``call_later(delay, fn)`` returns a handle whose ``cancel()`` is idempotent
and lets go of ``fn`` at once; cancelled timers leave the heap when due, or
earlier when they pile up (``call_later`` compacts the heap once it has
doubled since the last compaction).
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
_MIN_COMPACTION = 256  # heap size from which call_later drops cancelled timers (then at twice what is left)


class Timer:
    """A scheduled callback; ``cancel()`` keeps it from running (if it has not yet).

    Cancelling also drops the callback: a cancelled timer stays in the heap
    until it is due or the heap is compacted, and must not keep alive what
    its callback refers to (a range read's answer of up to
    ``read_batch_bytes``, for the whole speculative-read delay).
    """

    __slots__ = ("due", "fn", "cancelled")

    def __init__(self, due: float, fn: Callable[[], None]) -> None:
        self.due = due
        self.fn: Callable[[], None] | None = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self.fn = None


class Scheduler:
    """A heap of timers served by one thread, started lazily and joined by ``close()``."""

    def __init__(self, name: str = "ledger-client-scheduler") -> None:
        self._name = name
        self._heap: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._compact_at = _MIN_COMPACTION

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        """Run ``fn`` on the scheduler thread after ``delay`` seconds (not if closed first)."""
        timer = Timer(time.monotonic() + max(0.0, delay), fn)
        with self._cond:
            if self._closed:
                timer.cancelled = True
                return timer
            if len(self._heap) >= self._compact_at:  # mostly cancelled timers not yet due: drop them
                self._heap = [item for item in self._heap if not item[2].cancelled]
                heapq.heapify(self._heap)
                self._compact_at = max(_MIN_COMPACTION, 2 * len(self._heap))
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
            fn = timer.fn
            if fn is None:  # cancelled since it was taken from the heap
                continue
            try:
                fn()
            except Exception:  # noqa: BLE001 - one bad callback must not stop the others
                log.exception("scheduled callback %r failed", fn)

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
