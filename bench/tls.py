"""Benchmark the cost of TLS: the same appends and Spark reads over plaintext and mutual TLS, interleaved in one run.

Usage: ``python bench/tls.py [--seconds 4] [--repetitions 5] [--rows 300000] [--quick] [--out FILE]``.

Starts two clusters of 3 real bookie processes each (SQLite metadata in a temporary directory): one in
plaintext, one with mutual TLS (certificates from ``security.certs.write_tls_files``, made for this run). Both
take adds on their framed add port (``--add-port``, docs/protocol.md W11; from the run after 2444130 on, with TLS
on it; before, TLS adds went over gRPC), as clients use it by default; reads go over gRPC.
Both stay up for the whole run; the measured runs alternate between them (plaintext, mTLS, plaintext, ...)
so that both see the same machine. Each run writes one new ledger (E=Qw=3, Qa=2) through ``LedgerClient``
with many adds in flight: 1 KiB entries (4,000 in flight) and 1 MiB entries (32 in flight), for
``--seconds``. Reported per size and transport: the median and the range (min..max) over the repetitions of
entries/s, MB/s and p50/p99 latency (``append_async`` to confirmation), and the median ratio mTLS /
plaintext.

Then a Spark read (a local session started as ``bench/spark_io.py`` starts its own, after the appends):
``--rows`` rows of ``bench/spark_io.py``'s input (``id bigint``, ``payload string`` of 100 random hex
characters), cached once, are written once to one stream on each cluster (E=Qw=3, Qa=2, the same rows on
both; the mTLS one with the options ``tlsCa``, ``tlsCert``, ``tlsKey``), after an untimed small write to
each cluster that starts Spark's Python workers and their clients. After one warm-up read per cluster,
whole-stream batch reads into Spark's ``noop`` sink (every row materialized) alternate plaintext, mTLS,
... ``--repetitions`` times each. Reported per transport: median and range of rows/s and MB/s (MB: the
rows' 108 bytes of data each, as in ``bench/spark_io.py``), of the seconds, and of the share of the
machine's cores kept busy; and the median ratio mTLS / plaintext. Each write is timed once (not a
measurement: one run).

``--quick``: 1 s append runs, a 20,000-row stream, 1 repetition (a smoke run of a few minutes, not a
measurement). Prints one JSON document (and writes it with ``--out``). Bookies, client and Spark share
this machine's cores (see the load averages): the figures compare the two transports, they are not the
system's limits.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.cli import BenchParser, log_warnings  # noqa: E402
from bench.output import emit  # noqa: E402

from replication import drive_writer  # noqa: E402
from spark_io import PAYLOAD_BYTES, ROW_BYTES, Run, make_input, timed  # noqa: E402
from pyspark_ledger.client import ClientConfig, LedgerClient  # noqa: E402
from pyspark_ledger.security.certs import write_tls_files  # noqa: E402
from pyspark_ledger.security.tls import ClientTls  # noqa: E402
from pyspark_ledger.spark import executor  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster  # noqa: E402
from pyspark_ledger.testing.spark import local_spark_session, stop_spark_session  # noqa: E402

KiB, MiB = 1024, 1024 * 1024
SIZES = {"1KiB": (KiB, 4_000), "1MiB": (MiB, 32)}
METRICS = ("entries_per_s", "mb_per_s", "p50_ms", "p99_ms")
READ_METRICS = ("rows_per_s", "mb_per_s", "seconds", "share_of_all_cores_busy")
PASSWORD = b"bench-tls"
STREAM = "bench-tls"
PARTITIONS = 2  # input partitions, hence stream partitions (Spark runs local[2])
QUICK_ROWS = 20_000
WARM_UP_ROWS = 1_000  # of the untimed write that starts Spark's Python workers


def one_run(uri: str, tls: ClientTls | None, size: int, inflight: int, seconds: float) -> dict:
    config = ClientConfig(max_inflight_adds=inflight, tls=tls)
    with LedgerClient(uri, config) as client:
        writer = client.create_ledger(3, 3, 2, password=PASSWORD)
        result = drive_writer(writer, size, seconds, inflight)
        writer.close()
        client.delete_ledger(writer.ledger_id, PASSWORD)
    return result


def summary(runs: list[dict], metrics: tuple[str, ...] = METRICS) -> dict:
    """Median and range of each metric over the repetitions."""
    return {metric: {"median": round(statistics.median(run[metric] for run in runs), 3),
                     "min": min(run[metric] for run in runs), "max": max(run[metric] for run in runs)}
            for metric in metrics}


def ratios(summarized: dict, metrics: tuple[str, ...]) -> dict:
    """mTLS's median over plaintext's, per metric."""
    return {metric: round(summarized["mtls"][metric]["median"] / summarized["plaintext"][metric]["median"], 3)
            for metric in metrics if summarized["plaintext"][metric]["median"]}


def read_figures(rows: int, run: Run) -> dict:
    cores = os.cpu_count() or 1
    return {"seconds": round(run.seconds, 3), "rows_per_s": round(rows / run.seconds),
            "mb_per_s": round(rows * ROW_BYTES / run.seconds / 1e6, 1),
            "share_of_all_cores_busy": round(run.machine_cpu_s / (run.seconds * cores), 2)}


def spark_reads(spark, options: dict[str, dict], rows: int, repetitions: int) -> dict:
    """Write the same ``rows`` once to a stream on each cluster (``options`` per transport: how Spark reaches
    it), then time whole-stream reads into ``noop``, alternating the transports, after one warm-up each."""
    def write(source, reach: dict) -> None:
        source.write.format("ledger").mode("append").options(
            **reach, ensembleSize="3", writeQuorum="3", ackQuorum="2").save()

    warm = spark.range(0, WARM_UP_ROWS, numPartitions=PARTITIONS).selectExpr("id", "'warm-up' AS payload")
    for reach in options.values():  # starts Spark's Python workers and each cluster's clients: not timed
        write(warm, {**reach, "stream": f"{reach['stream']}-warm-up"})
    frame = make_input(spark, rows, PARTITIONS)
    writes, readings = {}, {}
    for transport, reach in options.items():
        write_run = timed(lambda reach=reach: write(frame, reach))
        writes[transport] = read_figures(rows, write_run)
        readings[transport] = spark.read.format("ledger").options(**reach).load()
    frame.unpersist()
    for transport, reading in readings.items():
        counted = reading.count()  # also the warm-up of this cluster's reads
        if counted != rows:
            raise RuntimeError(f"the {transport} stream holds {counted} rows, not {rows}")
        reading.write.format("noop").mode("overwrite").save()
    runs: dict[str, list[dict]] = {transport: [] for transport in readings}
    for _ in range(repetitions):
        for transport, reading in readings.items():
            run = timed(lambda reading=reading: reading.write.format("noop").mode("overwrite").save())
            runs[transport].append(read_figures(rows, run))
    summarized = {transport: summary(done, READ_METRICS) for transport, done in runs.items()}
    return {"rows": rows, "row": f"id bigint + payload string of {PAYLOAD_BYTES} characters",
            "mb": f"{ROW_BYTES} bytes per row", "stream_partitions": PARTITIONS,
            "read_input_partitions": {transport: reading.rdd.getNumPartitions()
                                      for transport, reading in readings.items()},
            "sink": "noop", "order": "interleaved: plaintext, mtls, plaintext, ...",
            "write_once": writes, **summarized, "mtls_over_plaintext": ratios(summarized, READ_METRICS),
            "runs": runs}


def run(seconds: float, repetitions: int, rows: int) -> dict:
    result: dict = {"benchmark": "tls", "cpus": os.cpu_count(), "python": platform.python_version(),
                    "ensemble": {"E": 3, "Qw": 3, "Qa": 2}, "seconds_per_run": seconds,
                    "add_path": "framed add port (docs/protocol.md W11), plaintext and TLS",
                    "repetitions": repetitions, "order": "interleaved: plaintext, mtls, plaintext, ...",
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        directory = Path(tmp)
        files = write_tls_files(directory / "tls")
        tls = ClientTls(str(files.ca), str(files.client_cert), str(files.client_key))
        plain_uri = f"sqlite:///{directory}/plain.db?lease_seconds=5"
        mtls_uri = f"sqlite:///{directory}/mtls.db?lease_seconds=5"
        with BookieCluster(3, directory / "plain", plain_uri, add_port=0) as _plain, \
                BookieCluster(3, directory / "mtls", mtls_uri, tls_cert=files.bookie_cert, tls_key=files.bookie_key,
                              tls_client_ca=files.ca, add_port=0) as _mtls:
            for name, (size, inflight) in SIZES.items():
                one_run(plain_uri, None, size, inflight, min(seconds, 1.0))  # warm-up, not reported
                one_run(mtls_uri, tls, size, inflight, min(seconds, 1.0))
                runs: dict[str, list[dict]] = {"plaintext": [], "mtls": []}
                for _ in range(repetitions):
                    runs["plaintext"].append(one_run(plain_uri, None, size, inflight, seconds))
                    runs["mtls"].append(one_run(mtls_uri, tls, size, inflight, seconds))
                summarized = {transport: summary(done) for transport, done in runs.items()}
                result["sizes"][name] = {"inflight": inflight, **summarized,
                                         "mtls_over_plaintext": ratios(summarized, METRICS), "runs": runs}
            reach = {"plaintext": {"metadataServiceUri": plain_uri},
                     "mtls": {"metadataServiceUri": mtls_uri, "tlsCa": str(files.ca),
                              "tlsCert": str(files.client_cert), "tlsKey": str(files.client_key)}}
            reach = {transport: {**options, "stream": STREAM, "password": PASSWORD.decode()}
                     for transport, options in reach.items()}
            spark = local_spark_session("tls-bench")
            try:
                result["spark_version"] = spark.version
                result["spark_read"] = spark_reads(spark, reach, rows, repetitions)
            finally:
                for uri in (plain_uri, mtls_uri):
                    executor.close_all(uri)
                stop_spark_session(spark)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__, quick=f"1 s runs, {QUICK_ROWS} rows, 1 repetition: a smoke run")
    parser.number("--seconds", float, 4.0, 1.0, help="length of each measured run")
    parser.number("--repetitions", int, 5, 1, help="runs per size and transport")
    parser.number("--rows", int, 300_000, QUICK_ROWS, help="rows of the stream each Spark read reads")
    args = parser.parse_args(argv)
    log_warnings()
    return emit(run(args.seconds, args.repetitions, args.rows), args.out)


if __name__ == "__main__":
    sys.exit(main())
