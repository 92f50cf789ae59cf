"""Counts of one reader's range reads: what was sent, what was sent speculatively, what arrived too late to use.

A ``LedgerReader`` keeps one ``ReadStats`` and hands it to every fetch of
its reads (``entry_reads.RangeFetch``, ``striped_reads.StripedFetch``).
``range_reads`` counts every range read sent (a batch's, a stripe's, a
retry's after an error and a speculative one); ``speculative_reads`` those
sent because a replica was slow (docs/protocol.md L5, L7); ``late_answers``
the answers that arrived after their read was decided (the slow replica's
or the speculative one's: work of a bookie and of the client's network
thread that nobody used). ``snapshot()`` is a plain dict, for benchmarks and
logs.
"""
from __future__ import annotations

import threading

FIELDS = ("range_reads", "speculative_reads", "late_answers")


class ReadStats:
    """Thread-safe counters (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(FIELDS, 0)

    def count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
