"""Benchmark one bookie process: streamed adds of 1 KiB and 1 MiB entries, against the disk's raw limits.

Usage: ``python bench/bookie.py [--duration 10] [--out FILE] [--dir DIR]``.

Starts a real bookie (``pyspark_ledger.testing.bookies``) on 127.0.0.1 with
SQLite metadata in a temporary directory, measures in the same run and on the
same filesystem the raw limits of the disk (a 4 KiB write+fdatasync loop; 1 MiB
sequential writes each fdatasync'd), then drives several add streams (one
ledger and one channel each, many adds in flight) through
``pyspark_ledger.client.BookieClient``. Prints one JSON document: entries/s,
MB/s, p50/p99 add latency (submit to acknowledgement, as the client sees it),
CPU microseconds per entry of the bookie and of this (client) process, the load
average, per entry size, the raw limits, and the goal ratios (1 KiB: entries/s vs
20,000; 1 MiB: MB/s ÷ raw fsync'd sequential MB/s vs 0.6).
"""
from __future__ import annotations

import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.cli import BenchParser  # noqa: E402
from bench.output import emit  # noqa: E402

from pyspark_ledger.client import BookieClient  # noqa: E402
from pyspark_ledger.client.add_listeners import AddCallbacks  # noqa: E402
from pyspark_ledger.client.add_wire import AddEncoder  # noqa: E402
from pyspark_ledger.client.io_loop import IoLoop  # noqa: E402
from pyspark_ledger.entry import EntryCodec, master_key  # noqa: E402
from pyspark_ledger.errors import BookieError  # noqa: E402
from pyspark_ledger.wire.v1 import bookie_pb2 as pb  # noqa: E402
from pyspark_ledger.testing.bookies import BookieProcess  # noqa: E402

from cpu_usage import CpuMeter  # noqa: E402
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
    """Adds entries to one ledger on its own channel and stream; records acked latencies in a window.

    Entries are encoded once (``AddEncoder``) and answered per batch (``AddStream.send`` with a listener),
    as the replication client does; every producer's stream runs on the one shared ``IoLoop``.
    """

    def __init__(self, address: str, ledger_id: int, payload: int, inflight: int, io_loop: IoLoop) -> None:
        super().__init__(name=f"bench-producer-{ledger_id}", daemon=True)
        self.client = BookieClient(address, io_loop=io_loop)
        self.stream = self.client.add_stream(max_inflight=inflight)
        self.ledger_id = ledger_id
        self.payload = os.urandom(payload)
        self.codec = EntryCodec()
        self.encoder = AddEncoder(ledger_id, KEY)
        self.stop_event = threading.Event()
        self.recording = False
        self.acked = 0
        self.failed = 0
        self.latencies: list[float] = []
        self.submitted: dict[int, float] = {}
        self.listener = AddCallbacks(self._answered, self._failed)

    def run(self) -> None:
        encode, frame, send = self.codec.encode, self.encoder.encode, self.stream.send
        payload, ledger_id, submitted, listener = self.payload, self.ledger_id, self.submitted, self.listener
        entry_id = 0
        while not self.stop_event.is_set():
            body = frame(entry_id, encode(ledger_id, entry_id, entry_id - 1, 0, payload))
            submitted[entry_id] = time.perf_counter()
            try:
                send(ledger_id, ((entry_id, body),), listener)
            except BookieError:
                self.failed += 1
                return
            entry_id += 1

    def _answered(self, bookie_id: str, results: list) -> None:
        now = time.perf_counter()
        for result in results:
            submitted = self.submitted.pop(result.entry_id)
            if result.status != pb.OK:
                self.failed += 1
            elif self.recording:
                self.acked += 1
                self.latencies.append(now - submitted)

    def _failed(self, bookie_id: str, keys: list, error: BookieError) -> None:
        self.failed += len(keys)

    def close(self) -> None:
        self.stop_event.set()
        self.join(60)
        self.client.close()


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def run_workload(bookie: BookieProcess, name: str, duration: float, first_ledger: int) -> dict:
    payload, streams, inflight = WORKLOADS[name]
    io_loop = IoLoop(name="bench-io-loop")
    producers = [Producer(bookie.address, first_ledger + n, payload, inflight, io_loop) for n in range(streams)]
    meter = CpuMeter({"bookie": bookie.pid, "client": os.getpid()})
    try:
        for producer in producers:
            producer.start()
        time.sleep(min(1.0, duration / 4))  # warm-up, not measured
        meter.start()
        for producer in producers:
            producer.recording = True
        started = time.perf_counter()
        time.sleep(duration)
        for producer in producers:
            producer.recording = False
        elapsed = time.perf_counter() - started
        cpu = meter.per_item(sum(p.acked for p in producers))
    finally:
        for producer in producers:
            producer.close()
        io_loop.close()
    acked = sum(p.acked for p in producers)
    latencies = [sample for p in producers for sample in p.latencies]
    entry_bytes = payload + 40  # header and crc32c digest
    return {
        "entry_payload_bytes": payload, "streams": streams, "inflight_per_stream": inflight,
        "seconds": round(elapsed, 2), "acked_entries": acked, "failed_entries": sum(p.failed for p in producers),
        "entries_per_s": round(acked / elapsed), "mb_per_s": round(acked * entry_bytes / elapsed / 1e6, 1),
        "latency_p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "latency_p99_ms": round(percentile(latencies, 0.99) * 1000, 2), **cpu,
    }


def register_ledgers(bookie: BookieProcess, ledger_ids: list[int]) -> None:
    """Give the benchmark's ledgers metadata: a bookie creates no ledger its metadata store lacks."""
    from pyspark_ledger.metadata import open_metadata_store
    from pyspark_ledger.metadata.model import Fragment, LedgerMetadata, master_key_check

    with open_metadata_store(bookie.metadata_uri) as store:
        for ledger_id in ledger_ids:
            store.create_ledger(LedgerMetadata(ledger_id, 1, 1, 1, (Fragment(0, (bookie.bookie_id,)),),
                                               master_key_check=master_key_check(KEY)))


def run(duration: float, base: Path) -> dict:
    raw_seconds = max(1.0, duration / 3)
    raw = {"fsync_4k": raw_fsync_rate(base, raw_seconds),
           "sequential_1mib_fsync": raw_sequential_fsync_bandwidth(base, raw_seconds)}
    bookie = BookieProcess(base / "bookie", f"sqlite:///{base}/metadata.db")
    bookie.start()
    try:
        register_ledgers(bookie, [1 + n for n in range(WORKLOADS["1KiB"][1])]
                         + [1000 + n for n in range(WORKLOADS["1MiB"][1])])
        small = run_workload(bookie, "1KiB", duration, 1)
        large = run_workload(bookie, "1MiB", duration, 1000)
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
    parser = BenchParser(__doc__)
    parser.number("--duration", float, 10.0, help="measured seconds per workload")
    parser.add_argument("--dir", type=Path, default=None,
                        help="directory on the disk to measure (default: a new temporary directory)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-bookie-", dir=args.dir) as tmp:
        result = run(args.duration, Path(tmp))
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
