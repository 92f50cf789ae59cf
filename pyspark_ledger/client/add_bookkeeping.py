"""Small bookkeeping of a writer: adds awaiting a bookie's answer, and user futures to complete in order.

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


class Outstanding:
    """Send times of unanswered adds, per bookie."""

    def __init__(self) -> None:
        self._sent: dict[str, dict[int, float]] = {}

    def sent(self, bookie: str, entry_id: int, now: float | None = None) -> None:
        per_bookie = self._sent.get(bookie)
        if per_bookie is None:
            per_bookie = self._sent[bookie] = {}
        per_bookie[entry_id] = time.monotonic() if now is None else now

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
