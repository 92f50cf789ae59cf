"""Small bookkeeping of a writer: the thread that owns its state, and the futures to complete in order.

``WriterOwner`` runs every event of a writer -- its callers' adds, the
bookies' answers, timeouts, ensemble-change outcomes -- on one thread, the
transport's network thread (``GrpcTransport``'s ``IoLoop``; the in-memory
transport's network thread), one event at a time. An event posted on that
thread runs at once (the answers of a bookie arrive there: no hand-off),
or, if an event is running, right after it; one posted from another thread
is handed to the loop (``call_soon``). The rare calls that need the state at
once -- close, abort, ``degraded_bookies`` -- use ``call(fn)``: ``fn`` runs on
the calling thread while the owner runs nothing, so they never wait behind
the network. Events run under a plain lock for that (held by the owner on
the hot path, uncontended; a poster that finds it taken leaves its event
queued for the holder, which drains the queue before it lets go). After each
run of events ``after`` runs (the writer completes its callers' futures
there), so futures complete after the state they report on is updated. Once
the loop is closed (the client is shutting down) events run on the poster's
thread.

``OrderedCompletions`` completes callers' futures in the order they were
queued (entry order), by one thread at a time; only the owner pushes. A future
its caller cancelled stays cancelled (``add_futures.complete_all``) and the others
are still completed.
(Which bookies are silent for ``add_timeout_s`` is the core's decision:
``protocol.add_timeouts``.)
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from typing import Callable, Protocol, Sequence

from pyspark_ledger.client.add_futures import complete_all, fail
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
        self._lock = threading.Lock()  # held while events run: by the owner, or by a thread in ``call``
        self._holder: int | None = None

    @property
    def loop(self) -> OwnerLoop:
        return self._loop

    def post(self, event: Callable[..., None], *args: object) -> None:
        """Run ``event(*args)`` on the owner thread, after the event running now (if any)."""
        if self._loop.in_loop_thread():
            self._queue.append((event, args))
            self._drain()
            return
        try:
            self._loop.call_soon(lambda: self.post(event, *args))
        except BookieUnavailableError:  # the loop is closed: nothing runs on it any more
            self._queue.append((event, args))
            self._drain()

    def call(self, fn: Callable[[], object]) -> object:
        """Run ``fn`` now, as an event, on this thread; returns its result once the completions after it ran.

        Blocks while the owner runs events (briefly: they never wait). Inside an event of this writer
        ``fn`` runs at once (as under a re-entrant lock)."""
        if self._holder == threading.get_ident():
            return fn()
        with self._lock:
            self._holder = threading.get_ident()
            try:
                result = fn()
                self._run_queued()
            finally:
                self._holder = None
        self._after()
        self._drain()
        return result

    def _drain(self) -> None:
        """Run queued events unless a thread is running them (it runs these too, before it lets go)."""
        while self._queue:
            if not self._lock.acquire(blocking=False):
                return
            self._holder = threading.get_ident()
            try:
                self._run_queued()
            finally:
                self._holder = None
                self._lock.release()
            self._after()

    def _run_queued(self) -> None:
        queue = self._queue
        while queue:
            event, args = queue.popleft()
            try:
                event(*args)
            except Exception:  # noqa: BLE001 - one event's bug must not strand the others
                log.exception("writer event %r failed", event)


class OrderedCompletions:
    """Futures to complete, in the order pushed, by whichever thread calls ``run`` first.

    The queue holds runs -- (futures, values, error) -- as they were pushed: a batch of confirmations is one
    item, completed with one loop over its pairs instead of one queue item per future."""

    def __init__(self) -> None:
        self._queue: deque[tuple[Sequence[Future], Sequence[object], BaseException | None]] = deque()
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._queue)

    def push(self, future: Future, value: object = None, error: BaseException | None = None) -> None:
        self._queue.append(((future,), (value,), error))

    def push_results(self, futures: list[Future], values: list[object]) -> None:
        """``push(future, value)`` for each pair, in order (the lists are kept: the caller must not change them)."""
        if futures:
            self._queue.append((futures, values, None))

    def run(self) -> int:
        """Complete what is queued; how many this call completed (0 at once if another thread is at it:
        it will finish). If completing one raises, the ones after it stay queued, first."""
        done = 0
        queue = self._queue
        while queue:
            if not self._lock.acquire(blocking=False):
                return done
            try:
                while queue:
                    futures, values, error = queue.popleft()
                    pairs = zip(futures, values)
                    try:
                        if error is None:
                            complete_all(pairs)  # on a raise, ``pairs`` has moved past the future that raised
                        else:
                            for future, _ in pairs:
                                fail(future, error)
                    except BaseException:
                        rest = list(pairs)
                        if rest:
                            queue.appendleft(([pair[0] for pair in rest], [pair[1] for pair in rest], error))
                        raise
                    done += len(futures)
            finally:
                self._lock.release()
        return done
