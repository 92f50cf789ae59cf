"""Small bookkeeping of a writer: its event queue and the futures to complete in order.

``WriterEvents`` runs the events posted by transport, scheduler and worker
threads under the writer's lock, one at a time and never one inside another
half-way: the poster runs them if it gets the lock at once; if another
thread holds it, the poster leaves them queued and returns (it never waits:
the transport thread must not stall behind a caller), and the holder runs
them when it lets go -- every ``with lock`` of the writer is followed by
``drain()``. Posters queue before they try the lock and holders drain after
they release it, so no event is ever stranded.

``OrderedCompletions`` completes callers' futures outside the writer's lock,
one thread at a time, in the order they were queued (entry order); it is not
thread-safe on its own: the writer's lock guards every ``push``. (Which
bookies are silent for ``add_timeout_s`` is the core's decision:
``protocol.add_timeouts``.)
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Callable


class WriterEvents:
    """A writer's queue of events, run under its lock (see the module docstring)."""

    def __init__(self, lock, after_drain: Callable[[], None]) -> None:
        self._lock = lock
        self._after_drain = after_drain
        self._inbox: deque[Callable[[], None]] = deque()
        self._busy = False

    def post(self, event: Callable[[], None]) -> None:
        """Run ``event`` under the lock, after any event being handled up the stack."""
        self._inbox.append(event)
        self.drain()

    def queue(self, event: Callable[[], None]) -> None:
        """Queue ``event`` (lock held); it runs when the current action or event is done."""
        self._inbox.append(event)

    def run(self, action: Callable[..., None], *args: object) -> None:
        """Run ``action(*args)`` (lock held) so that events it triggers wait until it is done, then them."""
        busy, self._busy = self._busy, True
        try:
            action(*args)
        finally:
            self._busy = busy
        if not busy:
            self._run_queued()

    def drain(self) -> None:
        """Run queued events unless another thread holds the lock (it will); ``after_drain`` runs outside it."""
        while self._inbox:
            if not self._lock.acquire(blocking=False):
                return
            try:
                if self._busy:  # this thread is inside an action or an event: that level runs them
                    return
                self._run_queued()
            finally:
                self._lock.release()
            self._after_drain()

    def _run_queued(self) -> None:
        self._busy = True
        try:
            while self._inbox:
                self._inbox.popleft()()
        finally:
            self._busy = False


class OrderedCompletions:
    """Futures to complete, in the order pushed, by whichever thread calls ``run`` first."""

    def __init__(self) -> None:
        self._queue: deque[tuple[Future, object, BaseException | None]] = deque()
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._queue)

    def push(self, future: Future, value: object = None, error: BaseException | None = None) -> None:
        self._queue.append((future, value, error))

    def run(self) -> None:
        """Complete what is queued; returns at once if another thread is doing it (it will finish)."""
        while self._queue:
            if not self._lock.acquire(blocking=False):
                return
            try:
                while self._queue:
                    future, value, error = self._queue.popleft()
                    if error is not None:
                        future.set_exception(error)
                    else:
                        future.set_result(value)
            finally:
                self._lock.release()
