"""Benchmark one bookie process: streamed adds of 1 KiB and 1 MiB entries, against the disk's raw limits.

Usage: ``python bench/bookie.py [--duration 10] [--out FILE] [--dir DIR]``.

Starts a real bookie (``pyspark_ledger.testing.bookies``) on 127.0.0.1 with
SQLite metadata in a temporary directory, measures in the same run and on the
same filesystem the raw limits of the disk (a 4 KiB write+fdatasync loop; 1 MiB
sequential writes each fdatasync'd), then drives several add streams (one
ledger and one channel each, many adds in flight) through
``pyspark_ledger.client.BookieClient``. Prints one JSON document: entries/s,
MB/s, p50/p99 add latency (submit to acknowledgement, as the client sees it)
per entry size, the raw limits, and the goal ratios (1 KiB: entries/s vs
20,000; 1 MiB: MB/s ÷ raw fsync'd sequential MB/s vs 0.6).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark_ledger.client import BookieClient  # noqa: E402
from pyspark_ledger.entry import EntryCodec, master_key  # noqa: E402
from pyspark_ledger.testing.bookies import BookieProcess  # noqa: E402

from disk_baseline import raw_fsync_rate, raw_sequential_fsync_bandwidth  # noqa: E402

MiB = 1024 * 1024
GOAL_SMALL_ENTRIES_PER_S = 20_000
GOAL_LARGE_DISK_RATIO = 0.6
KEY = master_key(b"bench")
WORKLOADS = {  # name: (payload bytes, streams, adds in flight per stream)
    "1KiB": (1024, 4, 1_000),
    "1MiB": (MiB, 2, 16),
}


class Producer(threading.Thread):
    """Adds entries to one ledger on its own channel and stream; records acked latencies in a window."""

    def __init__(self, address: str, ledger_id: int, payload: int, inflight: int) -> None:
        super().__init__(name=f"bench-producer-{ledger_id}", daemon=True)
        self.client = BookieClient(address)
        self.stream = self.client.add_stream(max_inflight=inflight)
        self.ledger_id = ledger_id
        self.payload = os.urandom(payload)
        self.codec = EntryCodec()
        self.stop_event = threading.Event()
        self.recording = False
        self.acked = 0
        self.failed = 0
        self.latencies: list[float] = []

    def run(self) -> None:
        encode, add, payload, ledger_id = self.codec.encode, self.stream.add, self.payload, self.ledger_id
        entry_id = 0
        while not self.stop_event.is_set():
            body = encode(ledger_id, entry_id, entry_id - 1, 0, payload)
            submitted = time.perf_counter()
            future = add(ledger_id, entry_id, KEY, body)
            future.add_done_callback(lambda done, t=submitted: self._done(done, t))
            entry_id += 1

    def _done(self, future, submitted: float) -> None:
        if future.exception() is None and future.result().ok:
            if self.recording:
                self.acked += 1
                self.latencies.append(time.perf_counter() - submitted)
        else:
            self.failed += 1

    def close(self) -> None:
        self.stop_event.set()
        self.join(60)
        self.client.close()


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def run_workload(address: str, name: str, duration: float, first_ledger: int) -> dict:
    payload, streams, inflight = WORKLOADS[name]
    producers = [Producer(address, first_ledger + n, payload, inflight) for n in range(streams)]
    try:
        for producer in producers:
            producer.start()
        time.sleep(min(1.0, duration / 4))  # warm-up, not measured
        for producer in producers:
            producer.recording = True
        started = time.perf_counter()
        time.sleep(duration)
        for producer in producers:
            producer.recording = False
        elapsed = time.perf_counter() - started
    finally:
        for producer in producers:
            producer.close()
    acked = sum(p.acked for p in producers)
    latencies = [sample for p in producers for sample in p.latencies]
    entry_bytes = payload + 40  # header and crc32c digest
    return {
        "entry_payload_bytes": payload, "streams": streams, "inflight_per_stream": inflight,
        "seconds": round(elapsed, 2), "acked_entries": acked, "failed_entries": sum(p.failed for p in producers),
        "entries_per_s": round(acked / elapsed), "mb_per_s": round(acked * entry_bytes / elapsed / 1e6, 1),
        "latency_p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "latency_p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
    }


def run(duration: float, base: Path) -> dict:
    raw_seconds = max(1.0, duration / 3)
    raw = {"fsync_4k": raw_fsync_rate(base, raw_seconds),
           "sequential_1mib_fsync": raw_sequential_fsync_bandwidth(base, raw_seconds)}
    bookie = BookieProcess(base / "bookie", f"sqlite:///{base}/metadata.db")
    bookie.start()
    try:
        small = run_workload(bookie.address, "1KiB", duration, 1)
        large = run_workload(bookie.address, "1MiB", duration, 1000)
    finally:
        exit_status = bookie.stop()
    raw_mb = raw["sequential_1mib_fsync"]["mb_per_s"]
    return {
        "benchmark": "bookie", "duration_s": duration, "cpus": os.cpu_count(), "python": platform.python_version(),
        "raw_disk": raw, "adds_1kib": small, "adds_1mib": large,
        "ratios": {
            "small_entries_per_s_vs_goal": round(small["entries_per_s"] / GOAL_SMALL_ENTRIES_PER_S, 2),
            "small_goal_entries_per_s": GOAL_SMALL_ENTRIES_PER_S,
            "large_mb_per_s_vs_raw_fsync_sequential": round(large["mb_per_s"] / raw_mb, 2) if raw_mb else None,
            "large_goal_ratio": GOAL_LARGE_DISK_RATIO,
        },
        "bookie_exit_status": exit_status,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per workload (default 10)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON to this file")
    parser.add_argument("--dir", type=Path, default=None,
                        help="directory on the disk to measure (default: a new temporary directory)")
    args = parser.parse_args(argv)
    if args.duration <= 0:
        parser.error("--duration must be positive")
    with tempfile.TemporaryDirectory(prefix="bench-bookie-", dir=args.dir) as tmp:
        result = run(args.duration, Path(tmp))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
