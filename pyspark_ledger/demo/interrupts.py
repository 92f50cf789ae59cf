"""Ctrl-C and SIGTERM for the demo: a request to stop, acted on where it is safe.

A KeyboardInterrupt raised in the middle of a py4j call leaves Spark's gateway
half-way through a command, and the cleanup that follows cannot talk to the
JVM any more (pyspark's own SIGINT handler even makes a second py4j call from
inside the signal handler). So ``StopSignals`` only records the first SIGINT
or SIGTERM; the run calls ``check()`` between steps and in its polling loops,
which raises KeyboardInterrupt there, and everything unwinds cleanly. A second
signal raises at once (force), for a run stuck in a long call.

pyspark installs its SIGINT handler when the SparkContext starts, so the run
calls ``install()`` again once Spark is up.
"""
from __future__ import annotations

import os
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)
NOTICE = b"\nledger demo: stopping at the next safe point (Ctrl-C again to stop at once)...\n"


class StopSignals:
    """Records SIGINT/SIGTERM; ``check()`` turns a recorded one into KeyboardInterrupt."""

    def __init__(self) -> None:
        self._requested = threading.Event()
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def install(self) -> None:
        """(Re)install the handlers (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNALS:
            previous = signal.signal(signum, self._on_signal)
            self._previous.setdefault(signum, previous)

    def check(self) -> None:
        if self._requested.is_set():
            raise KeyboardInterrupt

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def __enter__(self) -> "StopSignals":
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def _on_signal(self, _signum, _frame) -> None:
        if self._requested.is_set():
            raise KeyboardInterrupt
        self._requested.set()
        os.write(2, NOTICE)
