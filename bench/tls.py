"""Benchmark the cost of TLS: the same appends over plaintext and mutual TLS, interleaved in one run.

Usage: ``python bench/tls.py [--seconds 4] [--repetitions 5] [--quick] [--out FILE]``.

Starts two clusters of 3 real bookie processes each (SQLite metadata in a temporary directory): one in
plaintext, one with mutual TLS (certificates from ``security.certs.write_tls_files``, made for this run).
Both stay up for the whole run; the measured runs alternate between them (plaintext, mTLS, plaintext, ...)
so that both see the same machine. Each run writes one new ledger (E=Qw=3, Qa=2) through ``LedgerClient``
with many adds in flight: 1 KiB entries (4,000 in flight) and 1 MiB entries (32 in flight), for
``--seconds``. Reported per size and transport: the median and the range (min..max) over the repetitions of
entries/s, MB/s and p50/p99 latency (``append_async`` to confirmation), and the median ratio mTLS /
plaintext. ``--quick``: 1 s runs, 2 repetitions (a smoke run, not a measurement). Prints one JSON
document (and writes it with ``--out``). Bookies and client share this machine's cores (see the load
averages): the figures compare the two transports, they are not the system's limits.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replication import drive_writer  # noqa: E402
from pyspark_ledger.client import ClientConfig, LedgerClient  # noqa: E402
from pyspark_ledger.security.certs import write_tls_files  # noqa: E402
from pyspark_ledger.security.tls import ClientTls  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster  # noqa: E402

KiB, MiB = 1024, 1024 * 1024
SIZES = {"1KiB": (KiB, 4_000), "1MiB": (MiB, 32)}
METRICS = ("entries_per_s", "mb_per_s", "p50_ms", "p99_ms")
PASSWORD = b"bench-tls"


def one_run(uri: str, tls: ClientTls | None, size: int, inflight: int, seconds: float) -> dict:
    config = ClientConfig(max_inflight_adds=inflight, tls=tls)
    with LedgerClient(uri, config) as client:
        writer = client.create_ledger(3, 3, 2, password=PASSWORD)
        result = drive_writer(writer, size, seconds, inflight)
        writer.close()
        client.delete_ledger(writer.ledger_id)
    return result


def summary(runs: list[dict]) -> dict:
    """Median and range of each metric over the repetitions."""
    return {metric: {"median": round(statistics.median(run[metric] for run in runs), 3),
                     "min": min(run[metric] for run in runs), "max": max(run[metric] for run in runs)}
            for metric in METRICS}


def run(seconds: float, repetitions: int) -> dict:
    result: dict = {"benchmark": "tls", "cpus": os.cpu_count(), "python": platform.python_version(),
                    "ensemble": {"E": 3, "Qw": 3, "Qa": 2}, "seconds_per_run": seconds,
                    "repetitions": repetitions, "order": "interleaved: plaintext, mtls, plaintext, ...",
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        directory = Path(tmp)
        files = write_tls_files(directory / "tls")
        tls = ClientTls(str(files.ca), str(files.client_cert), str(files.client_key))
        plain_uri = f"sqlite:///{directory}/plain.db?lease_seconds=5"
        mtls_uri = f"sqlite:///{directory}/mtls.db?lease_seconds=5"
        with BookieCluster(3, directory / "plain", plain_uri) as _plain, \
                BookieCluster(3, directory / "mtls", mtls_uri, tls_cert=files.bookie_cert, tls_key=files.bookie_key,
                              tls_client_ca=files.ca) as _mtls:
            for name, (size, inflight) in SIZES.items():
                one_run(plain_uri, None, size, inflight, min(seconds, 1.0))  # warm-up, not reported
                one_run(mtls_uri, tls, size, inflight, min(seconds, 1.0))
                runs: dict[str, list[dict]] = {"plaintext": [], "mtls": []}
                for _ in range(repetitions):
                    runs["plaintext"].append(one_run(plain_uri, None, size, inflight, seconds))
                    runs["mtls"].append(one_run(mtls_uri, tls, size, inflight, seconds))
                summarized = {transport: summary(done) for transport, done in runs.items()}
                result["sizes"][name] = {
                    "inflight": inflight, **summarized,
                    "mtls_over_plaintext": {metric: round(summarized["mtls"][metric]["median"]
                                                          / summarized["plaintext"][metric]["median"], 3)
                                            for metric in METRICS if summarized["plaintext"][metric]["median"]},
                    "runs": runs}
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each measured run (default 4)")
    parser.add_argument("--repetitions", type=int, default=5, help="runs per size and transport (default 5)")
    parser.add_argument("--quick", action="store_true", help="1 s runs, 2 repetitions: a smoke run")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repetitions < 1:
        parser.error("--seconds must be > 0 and --repetitions >= 1")
    seconds, repetitions = (1.0, 2) if args.quick else (args.seconds, args.repetitions)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    text = json.dumps(run(seconds, repetitions), indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
