"""What the fetches of one reader share: counts of its range reads, and when an answer of them last came.

A ``LedgerReader`` keeps one ``ReadStats`` and hands it to every fetch of
its reads (``entry_reads.RangeFetch``, ``striped_reads.StripedFetch``).
``range_reads`` counts every range read sent (a batch's, a stripe's, a
retry's after an error and a speculative one); ``speculative_reads`` those
sent because a replica was slow (docs/protocol.md L5, L7); ``late_answers``
the answers that arrived after their read was decided (the slow replica's
or the speculative one's: work of a bookie and of the client's network
thread that nobody used). ``snapshot()`` is a plain dict, for benchmarks and
logs.

``answered()`` notes that an answer of any of the reader's range reads has
arrived, or been verified, now (``last_answer``, a ``clock`` reading): a
speculative read's clock starts again from there (docs/protocol.md L7,
``read_rules.slow_after``).
"""
from __future__ import annotations

import threading
import time
from typing import Callable

FIELDS = ("range_reads", "speculative_reads", "late_answers")


class ReadStats:
    """Thread-safe counters (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(FIELDS, 0)
        self.clock = clock
        self.last_answer = float("-inf")

    def answered(self) -> None:
        self.last_answer = self.clock()  # one float store: no lock needed, and readers take any recent value

    def count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
