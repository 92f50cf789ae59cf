"""The add path's metrics as plain counts (bookie_server/metric_tallies.py): the samples a scrape gets are those
``prometheus_client``'s own metrics give for the same updates, and concurrent updates lose nothing."""
from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bookie_server.metric_tallies import Tally
from bookie_server.metrics import _BYTE_BUCKETS, _LATENCY_BUCKETS, _RECORD_BUCKETS, BookieMetrics
from pyspark_ledger.wire.v1 import bookie_pb2 as pb


def samples(registry: CollectorRegistry, prefix: str) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of the families whose name starts with ``prefix``."""
    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.startswith(prefix) and not sample.name.endswith("_created"):
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def reference(name: str, bounds, values) -> dict[tuple, float]:
    """What prometheus_client's Histogram exposes for ``values``."""
    registry = CollectorRegistry()
    histogram = Histogram(name, "reference", buckets=bounds, registry=registry)
    for value in values:
        histogram.observe(value)
    return samples(registry, name)


LATENCIES = [0.0, 0.00005, 0.0001, 0.00010001, 0.003, 0.25, 9.99, 10.0, 10.5, 1e6]  # bounds themselves included
RECORDS = [1, 2, 3, 10_000, 10_001, 300]
BYTES = [0, 1024, 1025, 64 << 20, (64 << 20) + 1, 5000]


def test_histograms_match_prometheus_client_bucket_for_bucket() -> None:
    metrics = BookieMetrics()
    for latency in LATENCIES:
        metrics.adds_submitted(1)
        metrics.adds_completed([pb.OK], latency, 10)
    for records, nbytes, latency in zip(RECORDS, BYTES, LATENCIES):
        metrics.journal_synced(records, nbytes, latency)
    got = samples(metrics.registry, "bookie_")
    expected = {**reference("bookie_add_latency_seconds", _LATENCY_BUCKETS, LATENCIES),
                **reference("bookie_journal_batch_records", _RECORD_BUCKETS, RECORDS),
                **reference("bookie_journal_batch_bytes", _BYTE_BUCKETS, BYTES),
                **reference("bookie_journal_fsync_latency_seconds", _LATENCY_BUCKETS, LATENCIES[:len(RECORDS)])}
    assert {key: got.get(key) for key in expected} == expected


def test_answers_by_status_bytes_and_adds_in_flight() -> None:
    metrics = BookieMetrics()
    metrics.adds_submitted(5)
    metrics.adds_completed([pb.OK, pb.OK, pb.FENCED], 0.001, 2048)  # the stored bytes of the 2 OK adds
    metrics.adds_completed([pb.OK, 999], 0.001, 100)  # a status with no name counts as STATUS_UNSPECIFIED
    metrics.adds_refused(pb.TOO_MANY_REQUESTS, 4)
    got = samples(metrics.registry, "bookie_")

    def answers(status: str) -> float:
        return got[("bookie_add_requests_total", (("status", status),))]
    assert (answers("OK"), answers("FENCED"), answers("STATUS_UNSPECIFIED"), answers("TOO_MANY_REQUESTS"),
            answers("IO_ERROR")) == (3, 1, 1, 4, 0)
    assert got[("bookie_bytes_written_total", ())] == 2148
    assert got[("bookie_inflight_adds", ())] == 0
    assert got[("bookie_add_latency_seconds_count", ())] == 2


def test_concurrent_updates_lose_nothing() -> None:
    metrics = BookieMetrics()
    threads, rounds = 4, 5_000

    def work() -> None:
        for _ in range(rounds):
            metrics.adds_submitted(2)
            metrics.adds_completed([pb.OK, pb.OK], 0.0002, 7)
            metrics.journal_synced(2, 7, 0.0001)
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    got = samples(metrics.registry, "bookie_")
    assert got[("bookie_add_requests_total", (("status", "OK"),))] == 2 * threads * rounds
    assert got[("bookie_bytes_written_total", ())] == 7 * threads * rounds
    assert got[("bookie_inflight_adds", ())] == 0
    assert got[("bookie_journal_batch_records_sum", ())] == 2 * threads * rounds
    assert got[("bookie_journal_fsync_latency_seconds_count", ())] == threads * rounds


def test_a_tally_needs_increasing_bounds() -> None:
    with pytest.raises(ValueError, match="increasing"):
        Tally((1, 4, 2))
    with pytest.raises(ValueError, match="increasing"):
        Tally((1, 1, 2))
