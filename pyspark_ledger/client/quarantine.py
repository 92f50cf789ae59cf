"""A client's quarantine of bookies that failed it: the state kept for ``protocol.quarantine``'s rules.

Every writer of a ``LedgerClient`` reports the bookies that failed it here
(``failed``), with the reason; placement then prefers bookies outside the
quarantine (``ClientContext``), and errors that say no bookie was left name
the quarantined ones and why (``reasons``). Thread-safe; the clock is
injected (``time.monotonic`` by default) so tests can script time.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from pyspark_ledger.protocol.quarantine import QuarantineRule, Sentence, after_failure, forgotten, quarantined


class BookieQuarantine:
    """Quarantine records of one client (see the module docstring)."""

    def __init__(self, rule: QuarantineRule | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.rule = rule or QuarantineRule()
        self.clock = clock
        self._lock = threading.Lock()
        self._sentences: dict[str, Sentence] = {}
        self._reasons: dict[str, str] = {}

    def failed(self, bookie_id: str, reason: str) -> None:
        """``bookie_id`` failed this client at the clock's now (quarantined, or kept so)."""
        now = self.clock()
        with self._lock:
            for old in forgotten(self._sentences, now, self.rule):
                self._sentences.pop(old, None)
                self._reasons.pop(old, None)
            sentence = after_failure(self._sentences.get(bookie_id), now, self.rule)
            if sentence is not self._sentences.get(bookie_id):
                self._reasons[bookie_id] = reason
            self._sentences[bookie_id] = sentence

    def current(self) -> tuple[str, ...]:
        """The bookies in quarantine now, the one released first first."""
        now = self.clock()
        with self._lock:
            return quarantined(self._sentences, now)

    def reasons(self) -> dict[str, str]:
        """Bookie -> why it is in quarantine and for how much longer (only those in quarantine now)."""
        now = self.clock()
        with self._lock:
            return {bookie: f"{self._reasons.get(bookie, 'failed')} (quarantined "
                            f"{self._sentences[bookie].until - now:.1f} s more)"
                    for bookie in quarantined(self._sentences, now)}
