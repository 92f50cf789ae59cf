"""The client's network thread: one asyncio event loop that runs the add streams (grpc.aio) of its owner.

Waking a sleeping thread costs CPU (docs/measurements.md, "One network
thread per client"), and the synchronous gRPC API needs several wake-ups per
streamed message (a request-consumer thread, a receiver thread and a channel
spin thread per stream). Here one thread does the gRPC work of every stream
of a ``GrpcTransport`` (or of a standalone ``BookieClient``): writers queue
encoded adds from their own threads and ``kick`` the loop, and any number of
kicks before the loop gets to them cost one wake-up.

``run(coroutine)`` waits for a coroutine's result from another thread;
``submit(coroutine)`` returns a Future of it and ``spawn(coroutine)`` just
starts it, from any thread. Only the owner calls ``close()``: it cancels
what is still running, stops the loop and joins the thread.

Clients share one loop per process: ``acquire_io_loop()`` starts it for the
first user and ``release_io_loop()`` closes it (joining its thread) when the
last one lets go. grpc.aio serves every event loop of a process from one
poller thread that wakes all of them for each event, so one loop is also the
cheapest.

The loop is uvloop's where uvloop is installed (a dependency except on Windows), else asyncio's own;
``PYSPARK_LEDGER_EVENT_LOOP=asyncio`` (or ``uvloop``) chooses (``new_event_loop``). uvloop runs the loop's
turns, its sockets and its callbacks in compiled code: a paced add's client path took 15 % fewer instructions
on it and 10-20 % less of the client's CPU (docs/measurements.md, "Instructions per paced add in the client,
session 29").
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
from concurrent.futures import Future
from typing import Any, Callable, Coroutine

from pyspark_ledger.errors import BookieUnavailableError, InvalidConfigurationError, InvalidStateError
from pyspark_ledger.status import BookieStatus

log = logging.getLogger(__name__)
_CLOSE_TIMEOUT_S = 10.0
_SHUTDOWN_ROUNDS = 5
EVENT_LOOP_ENV = "PYSPARK_LEDGER_EVENT_LOOP"
EVENT_LOOPS = ("uvloop", "asyncio")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop for the network thread: uvloop's where it is installed, else asyncio's; ``EVENT_LOOP_ENV`` set to
    one of ``EVENT_LOOPS`` chooses (InvalidConfigurationError, naming the variable, for anything else, or for
    uvloop where it is not installed)."""
    choice = os.environ.get(EVENT_LOOP_ENV, "")
    if choice not in ("", *EVENT_LOOPS):
        raise InvalidConfigurationError(f"{EVENT_LOOP_ENV}={choice!r}: must be one of {', '.join(EVENT_LOOPS)} "
                                        "(unset: uvloop where it is installed, else asyncio)")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise InvalidConfigurationError(f"{EVENT_LOOP_ENV}=uvloop, but uvloop is not installed "
                                                "(pip install uvloop)") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class IoLoop:
    """An event loop on a daemon thread, started at once and joined by ``close()``."""

    def __init__(self, name: str = "ledger-io-loop") -> None:
        self._loop = new_event_loop()
        self._lock = threading.Lock()
        self._flushes: dict[int, Callable[[], None]] = {}
        self._kicked = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ident = self._thread.ident  # set by start(), before anything runs on the loop

    @property
    def closed(self) -> bool:
        return self._closed

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self._ident  # (asked several times per add: no Thread object looked up)

    def kick(self, key: int, flush: Callable[[], None]) -> None:
        """Run ``flush`` on the loop soon (once per ``key`` however often it is kicked before it runs)."""
        with self._lock:
            if self._closed:
                return
            self._flushes[key] = flush
            if self._kicked:
                return
            self._kicked = True
            if self.in_loop_thread():
                self._loop.call_soon(self._run_flushes)
            else:
                self._loop.call_soon_threadsafe(self._run_flushes)

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop (from any thread); BookieUnavailableError once closed."""
        with self._lock:
            self._check_open()
            self._loop.call_soon_threadsafe(fn)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Start ``coroutine`` as a task on the loop (from any thread)."""
        try:
            self.call_soon(lambda: self._loop.create_task(coroutine))
        except BookieUnavailableError:
            coroutine.close()
            raise

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> Future:
        """Run ``coroutine`` on the loop; a Future of its result (its callbacks run on the loop thread)."""
        with self._lock:
            if not self._closed:
                return asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        coroutine.close()
        future: Future = Future()
        future.set_exception(BookieUnavailableError("the client's network thread is closed",
                                                    status=BookieStatus.CLOSED))
        return future

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run ``coroutine`` on the loop and return its result (never call this on the loop thread)."""
        if self.in_loop_thread():
            coroutine.close()
            raise InvalidStateError(
                "a blocking bookie call was made on the client's network thread (from an add listener or a "
                "future callback): it would wait for itself; use the *_async form there")
        with self._lock:
            if self._closed:
                coroutine.close()
                self._check_open()
            future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(timeout)

    def close(self) -> None:
        """Cancel the remaining tasks, stop the loop and join its thread; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._shutdown()))
        if not self.in_loop_thread():
            self._thread.join(_CLOSE_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning("the client's network thread did not stop within %.0f s", _CLOSE_TIMEOUT_S)

    # --- the loop thread ----------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def _run_flushes(self) -> None:
        with self._lock:
            flushes, self._flushes = self._flushes, {}
            self._kicked = False
        for flush in flushes.values():
            try:
                flush()
            except Exception:  # noqa: BLE001 - one stream's bug must not stop the others
                log.exception("flushing an add stream failed")

    async def _shutdown(self) -> None:
        """Cancel every other task (again while cancelling starts new ones, a few rounds), then stop."""
        current = asyncio.current_task()
        for _ in range(_SHUTDOWN_ROUNDS):
            tasks = [task for task in asyncio.all_tasks(self._loop) if task is not current]
            if not tasks:
                break
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._loop.stop()

    def _check_open(self) -> None:
        if self._closed:
            raise BookieUnavailableError("the client's network thread is closed", status=BookieStatus.CLOSED)


_shared_lock = threading.Lock()
_shared: IoLoop | None = None
_shared_users = 0


def acquire_io_loop() -> IoLoop:
    """The process's shared loop (started if needed); pair every call with ``release_io_loop``."""
    global _shared, _shared_users
    with _shared_lock:
        if _shared is None:
            _shared = IoLoop()
        _shared_users += 1
        return _shared


def release_io_loop(io_loop: IoLoop) -> None:
    """One user of the shared loop is done; the last one closes it (and joins its thread)."""
    global _shared, _shared_users
    with _shared_lock:
        if io_loop is not _shared:
            return
        _shared_users -= 1
        if _shared_users:
            return
        _shared = None
    io_loop.close()
