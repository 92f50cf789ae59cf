"""Benchmark end-to-end latency of a Structured Streaming read at a 1 s trigger.

Usage: ``python bench/streaming_latency.py [--seconds 30] [--rate 20] [--quick] [--out FILE]``.

Starts 3 real bookie processes (SQLite metadata in a temporary directory) and a local Spark session
(``pyspark_ledger.spark.spark_session``). A stream of one partition (E=Qw=3, Qa=2) gets rows from a
``LogWriter`` in this process: ``--rate`` rows a second, one row per entry, each row carrying the wall
clock time at which it was handed to the writer. A streaming query reads the stream with the ``ledger``
source at ``trigger(processingTime="1 second")`` into ``foreachBatch``, which runs in this process and
takes, for each row it receives, the time since the row was written. The query runs first until its
first batch (Spark's start-up is left out), then the writer writes for ``--seconds``; p50/p99 of the
latencies. Goal of issue 16: p50 <= 1.5 x the trigger interval. ``--quick``: 10 s of writes.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.cli import BenchParser  # noqa: E402
from bench.output import emit  # noqa: E402

import pyarrow as pa  # noqa: E402

from pyspark_ledger.log.stream_client import StreamClient  # noqa: E402
from pyspark_ledger.log.stream_schema import stored_schema  # noqa: E402
from pyspark_ledger.spark import spark_session, stop_spark_session  # noqa: E402
from pyspark_ledger.spark.arrow_codec import encode_batch  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster  # noqa: E402

PASSWORD = "bench"
TRIGGER_S = 1.0
GOAL_RATIO = 1.5
STREAM = "latency"
SCHEMA = stored_schema(pa.schema([pa.field("seq", pa.int64()), pa.field("written_at", pa.float64())]))


def percentile_ms(values: list[float], fraction: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000.0, 1) if ordered else None


class Latencies:
    """What ``foreachBatch`` saw: the latency of each row, by its seq."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_seq: dict[int, float] = {}
        self.batches = 0

    def on_batch(self, frame, _batch_id: int) -> None:
        rows = frame.select("seq", "written_at").collect()
        now = time.time()
        with self.lock:
            self.batches += 1
            for row in rows:
                self.by_seq.setdefault(row.seq, now - row.written_at)


def write_rows(writer, rate: float, seconds: float, first: int) -> int:
    """Append one row per entry at ``rate``/s for ``seconds``; the next seq."""
    started, seq = time.perf_counter(), first
    while time.perf_counter() - started < seconds:
        delay = started + (seq - first) / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        batch = pa.RecordBatch.from_arrays([pa.array([seq], pa.int64()), pa.array([time.time()], pa.float64())],
                                           schema=SCHEMA)
        writer.append(encode_batch(batch))
        seq += 1
    return seq


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def run(seconds: float, rate: float) -> dict:
    result = {"benchmark": "streaming_latency", "cpus": os.cpu_count(), "python": platform.python_version(),
              "trigger_seconds": TRIGGER_S, "rows_per_second": rate, "write_seconds": seconds,
              "goal_p50_seconds": GOAL_RATIO * TRIGGER_S, "ensemble": {"E": 3, "Qw": 3, "Qa": 2},
              "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="bench-streaming-") as tmp:
        uri = f"sqlite:///{tmp}/metadata.db?lease_seconds=5"
        with BookieCluster(3, Path(tmp) / "bookies", uri), StreamClient(uri, password=PASSWORD) as streams:
            streams.create_stream(STREAM, 1, SCHEMA)
            writer = streams.open_writer(STREAM, 0)
            spark = query = None
            try:
                spark = spark_session("bench-streaming-latency")
                seen = Latencies()
                query = (spark.readStream.format("ledger")
                         .options(metadataServiceUri=uri, stream=STREAM, password=PASSWORD).load()
                         .writeStream.foreachBatch(seen.on_batch).trigger(processingTime=f"{TRIGGER_S} seconds")
                         .option("checkpointLocation", f"{tmp}/checkpoint").start())
                warm = write_rows(writer, rate, 1.0, 0)  # rows before the clock: the first batch's start-up
                wait_for(lambda: len(seen.by_seq) >= warm, 300, "the query's first rows")
                end = write_rows(writer, rate, seconds, warm)
                wait_for(lambda: len(seen.by_seq) >= end, 120, f"all {end} rows to be read")
                latencies = [seen.by_seq[seq] for seq in range(warm, end)]
                result["batches"] = seen.batches
            finally:
                try:
                    if query is not None:
                        query.stop()
                    if spark is not None:
                        stop_spark_session(spark)
                finally:
                    writer.close()
    result.update(rows=len(latencies), p50_ms=percentile_ms(latencies, 0.5), p99_ms=percentile_ms(latencies, 0.99),
                  max_ms=round(max(latencies) * 1000.0, 1), mean_ms=round(statistics.fmean(latencies) * 1000.0, 1))
    result["p50_ratio_to_trigger"] = round(result["p50_ms"] / 1000.0 / TRIGGER_S, 2)
    result["goal_met"] = result["p50_ratio_to_trigger"] <= GOAL_RATIO
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__, quick="10 s of writes")
    parser.number("--seconds", float, 30.0, 10.0, help="seconds of writes measured")
    parser.number("--rate", float, 20.0, help="rows written a second")
    args = parser.parse_args(argv)
    return emit(run(args.seconds, args.rate), args.out)


if __name__ == "__main__":
    sys.exit(main())
