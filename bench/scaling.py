"""Benchmark how 1 KiB append throughput changes from 1 to 3 to 5 bookies, and with striping (E > Qw).

Usage: ``python bench/scaling.py [--seconds 6] [--repeats 3] [--quick] [--out FILE]``.

For each shape a cluster of that many real bookie processes is started (SQLite metadata in a temporary
directory) and one ``LedgerClient`` writer appends 1 KiB entries with 2,000 in flight for ``--seconds``:

* ``1_bookie``: E=Qw=Qa=1;
* ``3_bookies``: E=Qw=3, Qa=2 (every bookie stores every entry);
* ``5_bookies_striped``: E=5, Qw=3, Qa=2 (each entry on 3 of the 5, round robin).

The shapes run interleaved ``--repeats`` times (all clusters stay up); entries/s and p50/p99 latency from
``append_async`` to confirmation per run. Everything shares this machine's cores (see the load averages),
so more bookies also means more processes on the same cores. ``--quick``: 1 s runs, once.
"""
from __future__ import annotations

import contextlib
import os
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.cli import BenchParser  # noqa: E402
from bench.output import emit  # noqa: E402

from replication import drive_writer  # noqa: E402
from pyspark_ledger.client import ClientConfig, LedgerClient  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster  # noqa: E402

PASSWORD = b"bench"
SIZE, INFLIGHT = 1024, 2_000
SHAPES = {"1_bookie": (1, 1, 1, 1), "3_bookies": (3, 3, 3, 2), "5_bookies_striped": (5, 5, 3, 2)}  # n, E, Qw, Qa


def one_run(uri: str, ensemble: int, write_quorum: int, ack_quorum: int, seconds: float) -> dict:
    with LedgerClient(uri, ClientConfig(max_inflight_adds=INFLIGHT)) as client:
        writer = client.create_ledger(ensemble, write_quorum, ack_quorum, password=PASSWORD)
        try:
            return drive_writer(writer, SIZE, seconds, INFLIGHT)
        finally:
            writer.close()


def run(seconds: float, repeats: int) -> dict:
    result = {"benchmark": "scaling", "cpus": os.cpu_count(), "python": platform.python_version(),
              "payload_bytes": SIZE, "in_flight": INFLIGHT, "seconds_per_run": seconds,
              "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
              "shapes": {name: {"bookies": n, "E": e, "Qw": qw, "Qa": qa, "runs": []}
                         for name, (n, e, qw, qa) in SHAPES.items()}}
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp, contextlib.ExitStack() as stack:
        uris = {}
        for name, (count, *_quorums) in SHAPES.items():
            uri = f"sqlite:///{tmp}/metadata-{name}.db?lease_seconds=5"
            stack.enter_context(BookieCluster(count, Path(tmp) / name, uri))  # stopped on the way out
            uris[name] = uri
        for _ in range(repeats):
            for name, (_count, ensemble, write_quorum, ack_quorum) in SHAPES.items():
                result["shapes"][name]["runs"].append(one_run(uris[name], ensemble, write_quorum, ack_quorum,
                                                              seconds))
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__, quick="1 s runs, once")
    parser.number("--seconds", float, 6.0, 1.0, help="length of each run")
    parser.number("--repeats", int, 3, 1, help="rounds over the shapes")
    args = parser.parse_args(argv)
    return emit(run(args.seconds, args.repeats), args.out)


if __name__ == "__main__":
    sys.exit(main())
