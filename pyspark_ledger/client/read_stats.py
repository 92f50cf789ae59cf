"""What the fetches of one reader share: counts of its range reads, which of them are out, and when an answer
of them last came.

A ``LedgerReader`` keeps one ``ReadStats`` and hands it to every fetch of
its reads (``entry_reads.RangeFetch``, ``striped_reads.StripedFetch``).
``range_reads`` counts every range read sent (a batch's, a stripe's, a
retry's after an error and a speculative one); ``speculative_reads`` those
sent because a replica was slow (docs/protocol.md L5, L7); ``late_answers``
the answers that arrived after their read was decided (the slow replica's
or the speculative one's: work of a bookie and of the client's network
thread that nobody used); ``error_answers`` the answers, used, that were an
error (a read timed out, a bookie unreachable or refusing). ``snapshot()`` is a plain dict, for benchmarks and
logs.

What the speculative-read clock needs (docs/protocol.md L7,
``read_rules.slow_after``): ``answered(sent_at)`` notes that an answer of any
of the reader's range reads has arrived, or been verified, now
(``last_answer``, a ``clock`` reading), and, for an arrival, when that read
had been sent (``newest_answered_sent``: the latest such send time). A fetch
``sent`` a range read to a bookie and the read ``left`` once its answer
arrived or its fetch was decided without it; ``others_in_flight`` is how
many of the reader's reads are out to other bookies than one, not counting
the asking fetch's own.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Callable, Iterable

FIELDS = ("range_reads", "speculative_reads", "late_answers", "error_answers")


class ReadStats:
    """Thread-safe counters (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(FIELDS, 0)
        self._out: Counter[str] = Counter()  # bookie -> the reader's range reads out to it
        self.clock = clock
        self.last_answer = float("-inf")
        self.newest_answered_sent = float("-inf")

    def answered(self, sent_at: float | None = None) -> None:
        # float stores: readers take any recent value (a stale one only delays a speculative read)
        self.last_answer = self.clock()
        if sent_at is not None and sent_at > self.newest_answered_sent:
            self.newest_answered_sent = sent_at

    def sent(self, bookie: str) -> None:
        with self._lock:
            self._out[bookie] += 1
            self._counts["range_reads"] += 1

    def left(self, bookies: Iterable[str]) -> None:
        with self._lock:
            for bookie in bookies:
                self._out[bookie] -= 1

    def others_in_flight(self, bookie: str, own: Iterable[str]) -> int:
        """The reader's range reads out to bookies other than ``bookie``, less the asking fetch's ``own``."""
        with self._lock:
            return sum(self._out.values()) - self._out[bookie] - sum(1 for other in own if other != bookie)

    def count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
