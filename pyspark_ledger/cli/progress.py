"""Progress of long CLI operations on stderr, with no dependency.

On a terminal, ``ProgressBar`` redraws one line (a bar, ``done/total`` and
the rate) at most every 0.1 s. Anywhere else (a log file, a pipe, CI) it
prints a plain line every ``$LEDGER_PROGRESS_EVERY_S`` seconds (default
10) and one when the work is done, so a long run is never silent and a log
stays short. ``CopyProgress`` turns the ``(ledger_id, done, total)``
callbacks of re-replication into one such bar per ledger.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from pyspark_ledger.errors import InvalidConfigurationError

ENV_EVERY = "LEDGER_PROGRESS_EVERY_S"
DEFAULT_EVERY_S = 10.0
_REDRAW_S = 0.1


def line_interval_s() -> float:
    """Seconds between progress lines when not on a terminal: ``$LEDGER_PROGRESS_EVERY_S``, else 10."""
    text = os.environ.get(ENV_EVERY, "").strip()
    if not text:
        return DEFAULT_EVERY_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise InvalidConfigurationError(f"{ENV_EVERY}={text!r} is not a number of seconds >= 0 (e.g. 10)")
    return value


class ProgressBar:
    """``done/total`` of one piece of work: a bar on a terminal, periodic lines otherwise."""

    def __init__(self, label: str, total: int, out: TextIO | None = None, width: int = 30,
                 unit: str = "entries", every_s: float | None = None) -> None:
        self._label, self._total, self._width, self._unit = label, max(total, 0), width, unit
        self._out = sys.stderr if out is None else out
        self._tty = self._out.isatty()
        self._every_s = _REDRAW_S if self._tty else (line_interval_s() if every_s is None else every_s)
        self._started = time.monotonic()
        self._shown_at = self._started
        self._done = 0
        self._finished = False

    def update(self, done: int) -> None:
        self._done = done
        now = time.monotonic()
        if now - self._shown_at < self._every_s and done < self._total:
            return
        if not self._tty and done >= self._total:
            return  # the last line is finish()'s
        self._shown_at = now
        if self._tty:
            self._out.write(f"\r{self._label} [{self._bar(done)}] {done:,}/{self._total:,} ({self._rate(now):,.0f}/s)")
        else:
            self._out.write(f"{self._label}: {self._counts(done)} ({self._rate(now):,.0f} {self._unit}/s)\n")
        self._out.flush()

    def finish(self) -> None:
        """End the bar (a newline on a terminal; the closing line otherwise). Idempotent."""
        if self._finished:
            return
        self._finished = True
        now = time.monotonic()
        if self._tty:
            self._shown_at = float("-inf")  # draw the final state, then end the line
            self.update(self._done)
            self._out.write("\n")
        else:
            self._out.write(f"{self._label}: {self._counts(self._done)} in {now - self._started:.1f} s "
                            f"({self._rate(now):,.0f} {self._unit}/s)\n")
        self._out.flush()

    def _bar(self, done: int) -> str:
        filled = self._width * min(done, self._total) // max(self._total, 1)
        return "#" * filled + "-" * (self._width - filled)

    def _counts(self, done: int) -> str:
        percent = 100 * done // self._total if self._total else 100
        return f"{done:,}/{self._total:,} {self._unit} ({percent}%)"

    def _rate(self, now: float) -> float:
        return self._done / max(now - self._started, 1e-9)


class CopyProgress:
    """A ``(ledger_id, done, total)`` callback that shows one ``ProgressBar`` per ledger being copied."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out
        self._ledger: int | None = None
        self._bar: ProgressBar | None = None

    def __call__(self, ledger_id: int, done: int, total: int) -> None:
        if ledger_id != self._ledger:
            self.finish()
            self._ledger = ledger_id
            self._bar = ProgressBar(f"ledger {ledger_id}: copying", total, self._out)
        self._bar.update(done)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.finish()
        self._ledger, self._bar = None, None
