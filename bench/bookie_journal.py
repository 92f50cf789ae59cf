"""What the bookies' journals did during a benchmark's window, read from their /metrics endpoints.

``JournalWatch(bookies).start()`` reads each bookie's counters; ``stop(seconds)`` reads them again and gives,
per bookie, over the window: group commits (fsyncs) per second, records per commit, the fsync's mean and
p50/p99 time, and the bookie's own add latency (received to durable, one observation per storage batch: an
AddBatch of the stream), mean and p50/p99. Quantiles are interpolated inside the histograms' buckets (as
Prometheus' ``histogram_quantile`` does), so they are as coarse as the buckets (0.5, 1, 2.5, 5, 10, 25 ms
...); the means are exact.
"""
from __future__ import annotations

import urllib.request
from typing import Iterable

_FSYNC = "bookie_journal_fsync_latency_seconds"
_RECORDS = "bookie_journal_batch_records"
_ADD = "bookie_add_latency_seconds"
TIMEOUT_S = 10.0


def parse(text: str) -> dict[str, float]:
    """Prometheus text exposition: sample name with its labels (as written) -> value; comments skipped."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            samples[name] = float(value)
        except ValueError:
            continue
    return samples


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return parse(response.read().decode())


def buckets(samples: dict[str, float], name: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of histogram ``name``, in order of the bound (+Inf last)."""
    found = []
    prefix = f'{name}_bucket{{le="'
    for key, value in samples.items():
        if key.startswith(prefix):
            bound = key[len(prefix):].split('"', 1)[0]
            found.append((float("inf") if bound == "+Inf" else float(bound), value))
    return sorted(found)


def quantile(cumulative: list[tuple[float, float]], fraction: float) -> float | None:
    """The ``fraction`` quantile of a histogram's observations, linear inside its bucket; None if empty. A
    quantile in the +Inf bucket is given as the largest finite bound."""
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank, lower, below = fraction * cumulative[-1][1], 0.0, 0.0
    for bound, count in cumulative:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = bound, count
    return lower


def _difference(before: dict[str, float], after: dict[str, float], name: str) -> list[tuple[float, float]]:
    old = dict(buckets(before, name))
    return [(bound, count - old.get(bound, 0.0)) for bound, count in buckets(after, name)]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 3)


def window(before: dict[str, float], after: dict[str, float], seconds: float) -> dict:
    """One bookie's journal and add latency between two scrapes ``seconds`` apart (see the module docstring)."""
    def change(sample: str) -> float:
        return after.get(sample, 0.0) - before.get(sample, 0.0)
    commits, adds = change(f"{_FSYNC}_count"), change(f"{_ADD}_count")
    fsyncs, latencies = _difference(before, after, _FSYNC), _difference(before, after, _ADD)
    return {"commits_per_s": round(commits / seconds, 1) if seconds > 0 else None,
            "records_per_commit": round(change(f"{_RECORDS}_sum") / commits, 2) if commits else None,
            "fsync_mean_ms": _ms(change(f"{_FSYNC}_sum") / commits) if commits else None,
            "fsync_p50_ms": _ms(quantile(fsyncs, 0.5)), "fsync_p99_ms": _ms(quantile(fsyncs, 0.99)),
            "add_batches": int(adds),
            "received_to_durable_mean_ms": _ms(change(f"{_ADD}_sum") / adds) if adds else None,
            "received_to_durable_p50_ms": _ms(quantile(latencies, 0.5)),
            "received_to_durable_p99_ms": _ms(quantile(latencies, 0.99))}


class JournalWatch:
    """The journals of ``bookies`` (``BookieProcess``es with a /metrics URL) over one window."""

    def __init__(self, bookies: Iterable) -> None:
        self._urls = {f"bookie-{index}": bookie.metrics_url for index, bookie in enumerate(bookies)
                      if bookie.metrics_url}
        self._before: dict[str, dict[str, float]] = {}

    def start(self) -> "JournalWatch":
        self._before = {name: scrape(url) for name, url in self._urls.items()}
        return self

    def stop(self, seconds: float) -> dict:
        return {name: window(self._before[name], scrape(url), seconds) for name, url in self._urls.items()}
