"""Background threads owned by a metadata store: a task queue and a ticker.

Every thread started here has an owner that stops and joins it (``close``).
A failing task or callback is logged with its traceback and never kills the
thread; ``close`` from inside the thread itself does not deadlock.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

log = logging.getLogger(__name__)

_STOP = object()


def run_callback(callback: Callable[..., None], *args: object, what: str) -> None:
    """Call a user callback, logging (not raising) what it raises."""
    try:
        callback(*args)
    except Exception:  # noqa: BLE001 - a user callback must not kill our thread
        log.exception("%s callback %r failed", what, callback)


class TaskThread:
    """Runs submitted tasks one at a time, in order, on one daemon thread."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, task: Callable[[], None]) -> None:
        """Queue ``task``; ignored after close()."""
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put(task)

    def close(self, timeout: float = 30.0) -> None:
        """Stop after the task in progress (queued tasks are dropped) and join."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        self._queue.put(_STOP)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            task = self._queue.get()
            if task is _STOP or self._closed:
                return
            run_callback(task, what=self._name)


class TickerThread:
    """Calls ``tick`` every ``interval`` seconds on one daemon thread until closed."""

    def __init__(self, name: str, interval: float, tick: Callable[[], None]) -> None:
        self._interval = interval
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the thread (idempotent; a no-op after close)."""
        with self._lock:
            if self._started or self._stop.is_set():
                return
            self._started = True
            self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop ticking and join (idempotent)."""
        with self._lock:
            self._stop.set()
            started = self._started
        if started and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            run_callback(self._tick, what=self._thread.name)
