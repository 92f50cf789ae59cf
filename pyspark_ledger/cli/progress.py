"""A dependency-free progress bar on stderr for long CLI operations."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """``done/total`` as a bar with a rate, redrawn at most every 0.1 s; silent when not a terminal."""

    def __init__(self, label: str, total: int, out: TextIO = sys.stderr, width: int = 30) -> None:
        self._label, self._total, self._out, self._width = label, max(total, 1), out, width
        self._started = self._drawn_at = time.monotonic()
        self._enabled = out.isatty()

    def update(self, done: int) -> None:
        now = time.monotonic()
        if not self._enabled or (now - self._drawn_at < 0.1 and done < self._total):
            return
        self._drawn_at = now
        filled = self._width * done // self._total
        rate = done / max(now - self._started, 1e-9)
        bar = "#" * filled + "-" * (self._width - filled)
        self._out.write(f"\r{self._label} [{bar}] {done}/{self._total} ({rate:,.0f}/s)")
        self._out.flush()

    def finish(self) -> None:
        if self._enabled:
            self._out.write("\n")
            self._out.flush()
