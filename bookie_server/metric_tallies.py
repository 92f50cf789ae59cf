"""The add path's metrics as plain integers under one lock, turned into Prometheus samples only when scraped.

Every AddBatch a bookie stores updates about eight metrics (in-flight adds up and down, answers by status, the
batch's latency, bytes written; per group commit the fsync time, records and bytes). With ``prometheus_client``'s
``Counter``, ``Gauge`` and ``Histogram`` each update is three or four Python calls and a lock of its own, and a
histogram's observation walks its buckets in a Python loop: at 1,000 paced adds/s that was a large share of the
journal thread's completion work (docs/measurements.md, "Instructions per add in a bookie"). Here one lock covers a
whole batch's updates, a histogram's bucket is found by ``bisect`` (in C), and nothing is formatted until a scrape
asks (``AddPathTallies.collect``, which a ``CollectorRegistry`` calls).

The samples are those the ``prometheus_client`` metrics gave (names, labels, cumulative ``le`` buckets with the
same bounds, ``_count`` and ``_sum``), without the ``_created`` timestamps.
"""
from __future__ import annotations

import threading
from bisect import bisect_left
from typing import Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString


class Tally:
    """One histogram's counts: ``counts[i]`` values ≤ ``bounds[i]`` (and above ``bounds[i-1]``); the last slot
    counts values above every bound. Not locked: its owner's lock is held around ``add`` and ``family``."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"histogram bounds must be increasing: {bounds}")
        self.bounds = tuple(float(bound) for bound in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def add(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # the first bound ≥ value: Prometheus' "le"
        self.sum += value

    def family(self, name: str, documentation: str) -> HistogramMetricFamily:
        buckets, seen = [], 0
        for bound, count in zip(self.bounds + (float("inf"),), self.counts):
            seen += count
            buckets.append((floatToGoString(bound), seen))
        return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=self.sum)


class AddPathTallies:
    """The add path's counters, gauge and histograms (a Prometheus collector: register it in a registry).

    ``statuses`` names the add answers counted (status number -> label); an answer with any other number counts
    under ``other``. All updates go through the owner (``BookieMetrics``), which holds ``lock`` around them."""

    def __init__(self, statuses: dict[int, str], other: int, latency_bounds: Sequence[float],
                 record_bounds: Sequence[float], byte_bounds: Sequence[float]) -> None:
        self.lock = threading.Lock()
        self.status_names = dict(statuses)
        self.other = other
        self.adds = dict.fromkeys(self.status_names, 0)  # answers by status
        self.inflight = 0
        self.bytes_written = 0
        self.add_latency = Tally(latency_bounds)
        self.fsync_latency = Tally(latency_bounds)
        self.batch_records = Tally(record_bounds)
        self.batch_bytes = Tally(byte_bounds)

    def count_answers(self, status: int, count: int) -> None:
        """``count`` adds answered ``status`` (lock held)."""
        key = status if status in self.adds else self.other
        self.adds[key] += count

    def collect(self) -> Iterator:
        with self.lock:
            answers = [(name, self.adds[number]) for number, name in self.status_names.items()]
            inflight, written = self.inflight, self.bytes_written
            histograms = [tally.family(name, doc) for tally, name, doc in self._histograms()]
        adds = CounterMetricFamily("bookie_add_requests", "Adds answered, by status", labels=["status"])
        for name, value in answers:
            adds.add_metric([name], value)
        yield adds
        yield CounterMetricFamily("bookie_bytes_written", "Entry bytes stored", value=written)
        yield GaugeMetricFamily("bookie_inflight_adds", "Adds received and not yet durable", value=inflight)
        yield from histograms

    def _histograms(self) -> Iterable[tuple[Tally, str, str]]:
        return ((self.add_latency, "bookie_add_latency_seconds",
                 "Add latency, received to durable: one observation per storage batch"),
                (self.fsync_latency, "bookie_journal_fsync_latency_seconds", "Journal group-commit fsync time"),
                (self.batch_records, "bookie_journal_batch_records", "Journal records per fsync"),
                (self.batch_bytes, "bookie_journal_batch_bytes", "Journal bytes per fsync"))
