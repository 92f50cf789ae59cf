"""A daemon thread that runs one action every ``interval_s`` seconds until stopped (the bookie's GC, disk
monitor and storage watch)."""
from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)


class PeriodicThread:
    """``start()`` runs ``action`` every ``interval_s`` (first after one interval) and at once after ``wake()``;
    ``stop()`` joins it.

    An exception from ``action`` is logged with ``what`` and the next round runs as usual."""

    def __init__(self, name: str, interval_s: float, action: Callable[[], object], what: str) -> None:
        self._interval_s = interval_s
        self._action = action
        self._what = what
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` was called (a long round may check it to end early)."""
        return self._stop.is_set()

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Run a round now instead of at the end of the interval (quick, takes no lock)."""
        self._wake.set()

    def stop(self) -> None:
        """Stop and join (a round in progress finishes first). Idempotent."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._action()
            except Exception:  # noqa: BLE001 - a bug must not end the rounds silently: logged, run again
                log.exception("%s failed unexpectedly", self._what)
