"""Small bookkeeping of a writer: its event queue, adds awaiting a bookie's answer, futures to complete in order.

``WriterEvents`` runs the events posted by transport, scheduler and worker
threads under the writer's lock, one at a time and never one inside another
half-way: the poster runs them if it gets the lock at once; if another
thread holds it, the poster leaves them queued and returns (it never waits:
the transport thread must not stall behind a caller), and the holder runs
them when it lets go -- every ``with lock`` of the writer is followed by
``drain()``. Posters queue before they try the lock and holders drain after
they release it, so no event is ever stranded.

``Outstanding`` remembers when each add was sent to each bookie, so a bookie
silent for longer than ``add_timeout_s`` can be treated as failed (the oldest
unanswered add of each bookie is first in its insertion-ordered dict).
``OrderedCompletions`` completes callers' futures outside the writer's lock,
one thread at a time, in the order they were queued (entry order).
Neither is thread-safe on its own: the writer's lock guards ``Outstanding``
and every ``OrderedCompletions.push``.
"""
from __future__ import annotations

import threading
import time
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


class Outstanding:
    """Send times of unanswered adds, per bookie."""

    def __init__(self) -> None:
        self._sent: dict[str, dict[int, float]] = {}

    def sent(self, bookie: str, entry_id: int, now: float | None = None) -> None:
        per_bookie = self._sent.get(bookie)
        if per_bookie is None:
            per_bookie = self._sent[bookie] = {}
        per_bookie[entry_id] = time.monotonic() if now is None else now

    def sent_to_all(self, bookies, entry_id: int, now: float) -> None:
        """``sent(bookie, entry_id, now)`` for each of ``bookies`` (a write set)."""
        per = self._sent
        for bookie in bookies:
            per_bookie = per.get(bookie)
            if per_bookie is None:
                per_bookie = per[bookie] = {}
            per_bookie[entry_id] = now

    def of(self, bookie: str) -> dict[int, float] | None:
        """The bookie's unanswered adds (entry id -> send time), to pop answers from; None if none."""
        return self._sent.get(bookie)

    def answered(self, bookie: str, entry_id: int) -> None:
        per_bookie = self._sent.get(bookie)
        if per_bookie is not None:
            per_bookie.pop(entry_id, None)

    def forget(self, bookie: str) -> None:
        self._sent.pop(bookie, None)

    def silent_since(self, limit: float) -> list[tuple[str, int]]:
        """(bookie, oldest entry) for each bookie whose oldest unanswered add was sent before ``limit``."""
        silent = []
        for bookie, per_bookie in self._sent.items():
            oldest = next(iter(per_bookie.items()), None)
            if oldest is not None and oldest[1] < limit:
                silent.append((bookie, oldest[0]))
        return silent


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
