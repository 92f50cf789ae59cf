"""Benchmark Spark I/O through ``format("ledger")`` against parquet and an in-memory Arrow source, in one run.

Usage: ``python bench/spark_io.py [--rows 5000000] [--partitions 2] [--read-repeats 5] [--write-repeats 3]
[--compression none] [--out FILE]``.

The data: ``--rows`` rows of ``id bigint`` and ``payload string`` (100 random
hex characters per row, made of ``uuid()`` values, so no column compresses
away). It is generated once and cached in Spark's memory, so every write
below reads the same cached rows and pays only for its own sink:

* ``parquet``: Spark's built-in writer and reader, in a temporary directory;
* ``ledger``: a new stream on 3 real bookie processes (``Sandbox``), E=Qw=3,
  Qa=2, written with ``mode("append")`` (one ledger per task, one commit) and
  read back (input partitions are ledger entry ranges);
* ``arrow_memory`` (``bench/arrow_memory_source.py``): the ceiling of Spark's
  Python Data Source path. Its read makes Arrow batches in the Python worker's
  memory (``id bigint, payload binary`` of the same 100 bytes) and, as
  ``read_string``, the same with ``payload string``: the schema the ``ledger``
  read has. Its write counts the Arrow batches Spark hands over and stores
  nothing.

Reads are timed into Spark's ``noop`` sink, each ``--read-repeats`` times,
and writes ``--write-repeats`` times (a new stream each time; parquet
overwrites its directory): the median is reported, every run beside it in
order. The paths take turns (``interleaved``): all writes, then all reads, each
path's first run, then rounds of one run of every path, each round starting
one path later, so that every path meets the same load and the same warmth of
Spark's JVM (which speeds up over a path's repeated runs: parquet's reads of 5
million rows went from about 2 s to under 1 s within one run when they ran in
a block before the others). Each path's first run is reported apart
(``first_run``), outside the median: Spark kills a
Python worker, and the planner processes a Python data source job uses on
the driver, after a minute without work of their kind, so a path's first run
after other work starts them again, paying Python's start and imports
(pyspark, pyarrow, gRPC: seconds of CPU on a loaded 2-core machine), which
parquet never pays; and the JVM's first run of a path after a pause is slower
for every path, parquet's too (a read of 5 million rows on a quiet machine,
after 70 s idle: parquet's first run 3.6 s, the next 2.6 s, then 2.1-2.5 s;
``ledger``'s 6.3 s, 2.7 s, then 2.1-2.5 s). The
``ledger`` read also reports the bytes the bookies sent for it
(``bookie_bytes_read``, from their metrics) beside the stream's entry bytes:
more means entries were fetched twice (e.g. speculative reads). Every timed
run also reports the CPU seconds the whole machine spent meanwhile and the
share of its cores that kept busy (near 1: CPU-bound), and those seconds split
by process (``cpu_by_process``: Spark's JVM, the Python processes it started,
each bookie, this driver, the rest of the machine; ``cpu_usage.ProcessGroups``).
``--compression`` sets the ``ledger`` write's option ``compression``.
``client_read`` (``bench/client_read.py``) fetches the same entries again with a
plain ``LedgerReader`` in a fresh Python process, no Spark, and gives the CPU of
the client and of each bookie per MiB (of its cheapest run).

``limits``: what any ``ledger`` read or write over the same Spark Python data
source path, gRPC transport and disk must pay, each part measured in this run
after the timed runs (``bench/spark_limits.py``): the read's, from the
in-memory ``read_string`` run and a bare fetch of the stream's entry bytes
from 3 in-memory gRPC servers (``bench/bare_fetch.py``); the write's, from the
in-memory sink's run, the bare gRPC fan-out of entries of the stream's size to
3 no-op servers and 3 storage engines storing them on this disk. Each is the
slowest of its parts and of their CPU spread over the cores, each part its
cheapest run: an upper bound on speed. Goals:
``ledger`` read throughput >= 0.8 x the in-memory Arrow source's (reported
against both of its reads) and >= 1.0 x parquet's (issue 16), and ``ledger``
write time <= 1.0 x parquet's. Prints one JSON document (also
written to ``--out``); the bookies, Spark and its Python workers share the
machine's cores with whatever else runs there (see the load averages).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import arrow_memory_source  # noqa: E402
from bare_fetch import bare_fetch  # noqa: E402
from bench.cli import BenchParser  # noqa: E402
from bench.output import emit  # noqa: E402
from client_read import client_read  # noqa: E402
from cpu_usage import ProcessGroups, machine_busy_seconds  # noqa: E402
from spark_limits import own_cpu, read_limit, write_limit, write_parts  # noqa: E402
from pyspark_ledger.metadata import open_metadata_store  # noqa: E402
from pyspark_ledger.sandbox import Sandbox  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from pyspark_ledger.testing.spark import local_spark_session, stop_spark_session  # noqa: E402

PAYLOAD_BYTES = 100
GOALS = {"ledger_read_vs_arrow_memory_read_min": 0.8, "ledger_read_vs_parquet_read_min": 1.0,
         "ledger_write_vs_parquet_write_max": 1.0}
ROW_BYTES = 8 + PAYLOAD_BYTES


def make_input(spark, rows: int, partitions: int):
    """The cached input: ids and 100 random hex characters per row."""
    payload = f"substring(replace(concat(uuid(), uuid(), uuid(), uuid()), '-', ''), 1, {PAYLOAD_BYTES})"
    frame = spark.range(0, rows, numPartitions=partitions).selectExpr("id", f"{payload} AS payload").cache()
    if frame.count() != rows:
        raise RuntimeError("the cached input lost rows")
    return frame


class Run(NamedTuple):
    """One timed action: wall seconds, CPU seconds the whole machine spent meanwhile, and (when measured)
    those seconds split by process group (``cpu_usage.ProcessGroups``)."""

    seconds: float
    machine_cpu_s: float
    cpu_by_process: dict | None = None


def timed(action, groups: ProcessGroups | None = None) -> Run:
    before = groups.sample() if groups is not None else None
    busy, started = machine_busy_seconds(), time.perf_counter()
    action()
    seconds, machine = time.perf_counter() - started, machine_busy_seconds() - busy
    return Run(seconds, machine, None if groups is None else ProcessGroups.split(before, groups.sample()))


class Timing(NamedTuple):
    """A path's first run and the ``runs`` just after it, whose median ``figures`` reports (module docstring)."""

    first: Run
    runs: list[Run]


def interleaved(actions: dict, repeats: int, groups: ProcessGroups | None = None) -> dict[str, Timing]:
    """Each action's first run (in the given order), then ``repeats`` rounds that run every action once, each
    round starting one action later (A B C, B C A, C A B, ...): every path meets the same hour, the same load
    and the same warmth of Spark's JVM (its compiler speeds up whatever ran before, parquet's reads too), and
    none always follows the same neighbour (a write's dirty pages, a worker's exit)."""
    names = list(actions)
    firsts = {name: timed(actions[name], groups) for name in names}
    runs: dict[str, list[Run]] = {name: [] for name in names}
    for round_index in range(repeats):
        for offset in range(len(names)):
            name = names[(round_index + offset) % len(names)]
            runs[name].append(timed(actions[name], groups))
    return {name: Timing(firsts[name], runs[name]) for name in names}


def process_groups(spark, sandbox: Sandbox) -> ProcessGroups | None:
    """Spark's JVM alone, the Python processes it started (executors' workers, the driver's planners), the
    bookies, and this process (the Spark driver's Python side); None if the JVM's process is unknown."""
    process = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if process is None:
        return None
    return ProcessGroups({"jvm": (process.pid, False), "python_workers": (process.pid, True),
                          **{f"bookie-{index}": (bookie.pid, False) for index, bookie in enumerate(sandbox.bookies)},
                          "bench_driver": (os.getpid(), False)})


def figures(rows: int, timing: Run | list[Run] | Timing) -> dict:
    """Throughput of the median run, and what share of the machine's cores it kept busy: near 1 means the
    run was bound by CPU (of any process: the JVM, Python workers, bookies), well below 1 by waiting. Of a
    ``Timing``, the median of its ``runs``, and its first run apart (``first_run``)."""
    if isinstance(timing, Timing):
        first = figures(rows, timing.first)
        return dict(figures(rows, timing.runs), first_run={name: first[name] for name in (
            "seconds", "machine_cpu_seconds", "cpu_by_process") if name in first})
    timing = timing if isinstance(timing, list) else [timing]
    runs = sorted(timing, key=lambda run: run.seconds)
    median = runs[(len(runs) - 1) // 2]
    cores = os.cpu_count() or 1
    result = {"seconds": round(median.seconds, 3), "rows_per_s": round(rows / median.seconds),
              "mb_per_s": round(rows * ROW_BYTES / median.seconds / 1e6, 1),
              "machine_cpu_seconds": round(median.machine_cpu_s, 2),
              "share_of_all_cores_busy": round(median.machine_cpu_s / (median.seconds * cores), 2)}
    if median.cpu_by_process is not None:
        result["cpu_by_process"] = median.cpu_by_process
        # None where a Python worker's exit broke the split (a group went negative: its CPU left the tree)
        result["own_cpu_seconds_runs"] = [None if any(value < 0 for name, value in run.cpu_by_process.items()
                                                      if name != "rest_of_machine")
                                          else round(own_cpu(run.cpu_by_process), 2) for run in timing]
    return result if len(runs) == 1 else dict(result, runs=[round(run.seconds, 3) for run in timing])


class Paths:
    """Where each sink writes; ``stream`` names a new ledger stream per call."""

    def __init__(self, spark, sandbox: Sandbox, workdir: Path, read_repeats: int = 1, write_repeats: int = 1,
                 compression: str = "none") -> None:
        self.spark, self.sandbox, self.workdir, self.compression = spark, sandbox, workdir, compression
        self.read_repeats, self.write_repeats = read_repeats, write_repeats
        self._streams = 0
        self.groups: ProcessGroups | None = None  # set by measure()

    def new_stream(self) -> str:
        self._streams += 1
        return f"bench-{self._streams}"

    def ledger_options(self, *, write: bool = False) -> dict:
        replication = {"ensembleSize": "3", "writeQuorum": "3", "ackQuorum": "2"} if write else {}
        if write and self.compression != "none":
            replication["compression"] = self.compression
        return {"metadataServiceUri": self.sandbox.metadata_uri, **replication}

    def parquet_path(self, name: str) -> str:
        return str(self.workdir / f"{name}.parquet")


def write_actions(paths: Paths, frame) -> tuple[dict, list[str], Path]:
    """The three writes of the cached rows; the ledger's streams are named in the list, in order."""
    options = paths.ledger_options(write=True)
    streams_written: list[str] = []
    parquet = paths.parquet_path("data")
    memory_result = paths.workdir / "arrow-memory-write.json"

    def write_stream() -> None:
        streams_written.append(paths.new_stream())
        frame.write.format("ledger").mode("append").options(**options).save(streams_written[-1])

    return ({"parquet": lambda: frame.write.mode("overwrite").parquet(parquet), "ledger": write_stream,
             "arrow_memory": lambda: frame.write.format(arrow_memory_source.NAME).mode("append")
             .option("resultPath", str(memory_result)).save()}, streams_written, memory_result)


def read_actions(paths: Paths, rows: int, partitions: int, stream: str) -> tuple[dict, object]:
    """The four reads into ``noop``: parquet's files, the ledger stream, the in-memory source (binary and
    string payload); and the ledger read's DataFrame."""
    def into_noop(frame):
        return lambda: frame.write.format("noop").mode("overwrite").save()

    def memory(payload_type: str):
        return (paths.spark.read.format(arrow_memory_source.NAME)
                .options(rows=rows, partitions=partitions, payloadBytes=PAYLOAD_BYTES,
                         payloadType=payload_type).load())

    ledger = paths.spark.read.format("ledger").options(**paths.ledger_options()).load(stream)
    return ({"parquet": into_noop(paths.spark.read.parquet(paths.parquet_path("data"))),
             "ledger": into_noop(ledger), "arrow_memory": into_noop(memory("binary")),
             "arrow_memory_string": into_noop(memory("string"))}, ledger)


def ledger_facts(paths: Paths, stream: str, reading, rows: int) -> dict:
    """What the ledger stream holds (its spans, entries, bytes), checked to hold every row."""
    if reading.count() != rows:
        raise RuntimeError(f"stream {stream} holds {reading.count()} rows, not {rows}")
    streams = executor.stream_client(paths.sandbox.metadata_uri)
    info = streams.open_stream(stream)
    logs = streams.partition_logs(stream)
    spans = [f"{span.ledger_id}:{span.last_entry_id}" for log in logs.values() for span in log.spans]
    return {"spans": spans, "client_read": client_read(paths.sandbox, spans, paths.read_repeats),
            "stream_partitions": info.partitions, "ledgers": sum(len(log.spans) for log in logs.values()),
            "entries": sum(span.entry_count for log in logs.values() for span in log.spans),
            "entry_bytes": sum(span.length for log in logs.values() for span in log.spans),
            "read_schema": reading.schema.simpleString(), "read_input_partitions": reading.rdd.getNumPartitions()}


def bookie_bytes_read(sandbox: Sandbox) -> float:
    """Entry bytes the sandbox's bookies have sent to readers so far (their Prometheus counters)."""
    total = 0.0
    with open_metadata_store(sandbox.metadata_uri) as store:
        urls = [registration.info.get("metrics_url") for registration in store.bookies().values()]
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("bookie_bytes_read_total "):
                    total += float(line.split()[1])
    return total


def limits(sandbox: Sandbox, workdir: Path, results: dict, rows: int, repeats: int, fanout_seconds: float) -> dict:
    """The same-run limits of the read and the write (``bench/spark_limits.py``), with their measured parts."""
    ledger, memory = results["ledger"], results["arrow_memory"]
    fetch = bare_fetch(sandbox.metadata_uri, ledger["spans"], max(repeats, 1))
    parts = write_parts(workdir, ledger["entries"], ledger["entry_bytes"], fanout_seconds, max(repeats, 1))
    return {"read": read_limit(rows, memory["read_string"], fetch),
            "write": write_limit(rows, memory["write"], parts["bare_fanout"], parts["three_storages"],
                                 ledger["entries"]),
            "bare_fetch": fetch, **parts}


def measure(spark, sandbox: Sandbox, workdir: Path, rows: int, partitions: int, read_repeats: int = 1,
            write_repeats: int = 1, compression: str = "none", limit_repeats: int = 2,
            fanout_seconds: float = 3.0) -> dict:
    """Every write, then every read, interleaved (``interleaved``); then the limits."""
    paths = Paths(spark, sandbox, workdir, read_repeats, write_repeats, compression)
    paths.groups = process_groups(spark, sandbox)
    arrow_memory_source.register(spark)
    frame = make_input(spark, rows, partitions)
    writes, streams_written, memory_result = write_actions(paths, frame)
    written = interleaved(writes, write_repeats, paths.groups)
    if json.loads(memory_result.read_text())["rows"] != rows:
        raise RuntimeError("the in-memory Arrow sink did not receive every row")
    frame.unpersist()
    stream = streams_written[-1]
    reads, reading = read_actions(paths, rows, partitions, stream)
    sent_before = bookie_bytes_read(sandbox)
    read = interleaved(reads, read_repeats, paths.groups)
    sent = (bookie_bytes_read(sandbox) - sent_before) / (1 + read_repeats)  # the first run too
    size = sum(file.stat().st_size for file in Path(paths.parquet_path("data")).glob("*.parquet"))
    results = {"parquet": {"write": figures(rows, written["parquet"]), "read": figures(rows, read["parquet"]),
                           "bytes_on_disk": size},
               "ledger": {"write": figures(rows, written["ledger"]), "read": figures(rows, read["ledger"]),
                          **ledger_facts(paths, stream, reading, rows), "bookie_bytes_read": round(sent)},
               "arrow_memory": {"read": figures(rows, read["arrow_memory"]),
                                "read_string": figures(rows, read["arrow_memory_string"]),
                                "write": figures(rows, written["arrow_memory"])}}
    results["limits"] = limits(sandbox, workdir, results, rows, limit_repeats, fanout_seconds)
    return results


def ratios(results: dict) -> dict:
    ledger, parquet, memory = results["ledger"], results["parquet"], results["arrow_memory"]
    read_ratio = ledger["read"]["rows_per_s"] / memory["read"]["rows_per_s"]
    parquet_read_ratio = ledger["read"]["rows_per_s"] / parquet["read"]["rows_per_s"]
    same_schema_ratio = ledger["read"]["rows_per_s"] / memory["read_string"]["rows_per_s"]
    write_ratio = ledger["write"]["seconds"] / parquet["write"]["seconds"]
    limit = results["limits"]
    return {"ledger_read_vs_arrow_memory_read": round(read_ratio, 3),
            "ledger_read_vs_arrow_memory_string_read": round(same_schema_ratio, 3),
            "read_limit_vs_parquet_read": round(limit["read"]["rows_per_s"] / parquet["read"]["rows_per_s"], 3),
            "ledger_read_vs_read_limit": round(ledger["read"]["rows_per_s"] / limit["read"]["rows_per_s"], 3),
            "write_limit_vs_parquet_write": round(limit["write"]["seconds"] / parquet["write"]["seconds"], 3),
            "ledger_write_vs_write_limit": round(ledger["write"]["seconds"] / limit["write"]["seconds"], 3),
            "ledger_read_bookie_bytes_per_entry_byte": round(ledger["bookie_bytes_read"] / ledger["entry_bytes"], 3),
            "ledger_write_vs_parquet_write": round(write_ratio, 3),
            "ledger_read_vs_parquet_read": round(parquet_read_ratio, 3),
            "ledger_write_vs_arrow_memory_write": round(
                ledger["write"]["seconds"] / memory["write"]["seconds"], 3),
            "read_goal_met": read_ratio >= GOALS["ledger_read_vs_arrow_memory_read_min"],
            "read_goal_met_against_string_read": same_schema_ratio >= GOALS["ledger_read_vs_arrow_memory_read_min"],
            "read_goal_met_against_parquet": parquet_read_ratio >= GOALS["ledger_read_vs_parquet_read_min"],
            "write_goal_met": write_ratio <= GOALS["ledger_write_vs_parquet_write_max"]}


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__)
    parser.number("--rows", int, 5_000_000, help="rows written and read by each path")
    parser.number("--partitions", int, 2, help="input partitions (Spark runs local[2])")
    parser.add_argument("--driver-memory", default="4g", help="Spark driver memory (holds the cached input)")
    parser.number("--read-repeats", int, 5, help="timed runs of each read, after its first run; their median is "
                                                 "reported")
    parser.number("--write-repeats", int, 3, help="timed runs of each write, after its first run (a new stream "
                                                  "each time); their median is reported")
    parser.add_argument("--compression", default="none", choices=("none", "lz4", "zstd"),
                        help="the ledger write's option compression (default none)")
    parser.number("--limit-repeats", int, 2, 1, help="runs of the bare fetch and of the 3 storage engines (the limits "
                                                  "take the cheapest)")
    parser.number("--fanout-seconds", float, 3.0, 1.0, help="seconds of the bare fan-out (the write limit's gRPC part)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="spark-io-bench-"))
    spark = local_spark_session("spark-io-bench", conf={"spark.driver.memory": args.driver_memory})
    try:
        with Sandbox(bookies=3) as sandbox:
            results = measure(spark, sandbox, workdir, args.rows, args.partitions, args.read_repeats,
                              args.write_repeats, args.compression, args.limit_repeats, args.fanout_seconds)
            executor.close_all(sandbox.metadata_uri)
    finally:
        stop_spark_session(spark)
        shutil.rmtree(workdir, ignore_errors=True)
    document = {"benchmark": "spark_io", "rows": args.rows, "row": f"id bigint + payload of {PAYLOAD_BYTES} bytes",
                "partitions": args.partitions, "read_repeats": args.read_repeats,
                "write_repeats": args.write_repeats, "ledger_compression": args.compression,
                "ensemble": {"E": 3, "Qw": 3, "Qa": 2}, **results,
                "ratios": ratios(results), "goals": GOALS,
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                            "load_average_at_start": [round(x, 2) for x in load_before],
                            "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}}
    return emit(document, args.out)


if __name__ == "__main__":
    sys.exit(main())
