"""Small bookkeeping of a writer: the thread that owns its state, and the futures to complete in order.

``WriterOwner`` runs every event of a writer -- its callers' adds, the
bookies' answers, timeouts, ensemble-change outcomes -- on one thread, the
transport's network thread (``GrpcTransport``'s ``IoLoop``; the in-memory
transport's network thread), one event at a time: the writer's state needs no
lock. An event posted on that thread while no event runs is run at once (the
answers of a bookie arrive there: no hand-off); one posted while an event
runs waits until it is done; one posted from another thread is handed to the
loop (``call_soon``). ``call(fn)`` runs ``fn`` as an event and returns its
result (from any thread; on the owner thread, at once). After each run of
events ``after`` runs (the writer completes its callers' futures there), so
futures complete after the state they report on is updated. Once the loop is
closed (the client is shutting down) events run on the poster's thread: no
owner runs any more.

``OrderedCompletions`` completes callers' futures in the order they were
queued (entry order), by one thread at a time; only the owner pushes.
(Which bookies are silent for ``add_timeout_s`` is the core's decision:
``protocol.add_timeouts``.)
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from typing import Callable, Protocol

from pyspark_ledger.errors import BookieUnavailableError

log = logging.getLogger(__name__)


class OwnerLoop(Protocol):
    """The thread a writer's events run on (``IoLoop`` and the in-memory network offer it)."""

    def in_loop_thread(self) -> bool: ...

    def call_soon(self, fn: Callable[[], None]) -> None: ...


class WriterOwner:
    """Runs a writer's events on its owner thread, one at a time (see the module docstring)."""

    def __init__(self, loop: OwnerLoop, after: Callable[[], None]) -> None:
        self._loop = loop
        self._after = after
        self._queue: deque[tuple[Callable[..., None], tuple]] = deque()
        self._busy = False

    @property
    def loop(self) -> OwnerLoop:
        return self._loop

    def post(self, event: Callable[..., None], *args: object) -> None:
        """Run ``event(*args)`` on the owner thread, after the event running now (if any)."""
        if self._loop.in_loop_thread():
            self._queue.append((event, args))
            if not self._busy:
                self._run()
            return
        try:
            self._loop.call_soon(lambda: self.post(event, *args))
        except BookieUnavailableError:  # the loop is closed: nothing runs on it any more
            self._queue.append((event, args))
            if not self._busy:
                self._run()

    def call(self, fn: Callable[[], object]) -> object:
        """Run ``fn`` as an event, wait for it (and the completions after it) and return its result."""
        done: Future = Future()

        def event() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller
                done.set_exception(exc)
        if self._loop.in_loop_thread() and self._busy:
            event()  # inside an event of this writer: at once (as a re-entrant lock would)
        else:
            self.post(event)
        return done.result()

    def _run(self) -> None:
        self._busy = True
        try:
            while self._queue:
                event, args = self._queue.popleft()
                try:
                    event(*args)
                except Exception:  # noqa: BLE001 - one event's bug must not strand the others
                    log.exception("writer event %r failed", event)
        finally:
            self._busy = False
        self._after()


class OrderedCompletions:
    """Futures to complete, in the order pushed, by whichever thread calls ``run`` first."""

    def __init__(self) -> None:
        self._queue: deque[tuple[Future, object, BaseException | None]] = deque()
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._queue)

    def push(self, future: Future, value: object = None, error: BaseException | None = None) -> None:
        self._queue.append((future, value, error))

    def run(self) -> int:
        """Complete what is queued; how many this call completed (0 at once if another thread is at it:
        it will finish)."""
        done = 0
        while self._queue:
            if not self._lock.acquire(blocking=False):
                return done
            try:
                while self._queue:
                    future, value, error = self._queue.popleft()
                    done += 1
                    if error is not None:
                        future.set_exception(error)
                    else:
                        future.set_result(value)
            finally:
                self._lock.release()
        return done
