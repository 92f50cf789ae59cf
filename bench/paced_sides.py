"""Which side makes the paced tail: our client, or our bookies? Both clients against both kinds of server.

Usage: ``python bench/paced_sides.py [--dir DIR] [--seconds 8] [--repeats 3] [--rate 1000] [--out FILE]``.

A diagnosis tool, not one of ``python -m bench``'s benchmarks. The paced row of ``replication.py`` (1 KiB
entries at ``--rate``/s, E=Qw=3, Qa=2) crossed two ways:

* the client: ours (``LedgerClient``, as ``replication.py`` drives it) or the bare fan-out (``fanout_limits``:
  the same transport with no writer, no futures, no bookkeeping);
* the servers: 3 real bookies (fresh, in ``--dir``), or 3 durable servers (``durable_bookies.py``: receive,
  ``pwrite``, ``fdatasync``, answer, nothing else), their files in ``--dir`` too.

Every add takes the servers' framed add ports (docs/protocol.md W11), as ``replication.py``'s do: the bookies start
with ``--add-port 0`` (``replication.OURS``), the durable servers are registered with theirs, and the fan-out sends
over them (this tool sent over gRPC until session 30, a path our adds no longer take).

The four pairs run interleaved ``--repeats`` times (each pair once per round, in a rotating order), so the
machine's load falls on all of them alike. For each pair: every run's p50/p99 (to the second answer, as the
goal counts) and the CPU per add of the client and of each server, then the median and range of p50 and p99.
If the tail follows the servers (our client over durable servers near the fan-out's, the fan-out over our
bookies near ours), the bookies make it; if it follows the client, the client does.

The fan-out to real bookies sends adds of a ledger that a ``LedgerClient`` created (and keeps open: nothing
else writes to it), keyed as the benchmark's writer keys them. Every add of every run must succeed.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.cli import BenchParser, log_warnings  # noqa: E402
from bench.output import emit  # noqa: E402
from bookie_journal import scrape  # noqa: E402
from durable_bookies import durable_servers, sync_figures  # noqa: E402
from fanout_limits import KiB, PASSWORD, durable_file_room, fanout_run  # noqa: E402
from noop_bookies import noop_registrations  # noqa: E402
from replication import OURS, client_run  # noqa: E402
from pyspark_ledger.client import LedgerClient  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster  # noqa: E402

CLIENTS = ("ours", "fanout")
SERVERS = ("bookies", "durable")
PAIRS = tuple(f"{client}_over_{servers}" for servers in SERVERS for client in CLIENTS)


FRAMED_STREAMS = 'bookie_framed_add_connections_total{outcome="streamed"}'  # a bookie's framed add streams


@contextlib.contextmanager
def bookies(directory: Path):
    """3 fresh bookies in a new directory under ``directory``: (metadata URI, name -> pid, ledger id, a function that
    says how many framed add streams each bookie took so far) where the ledger is one a writer created and holds open
    for the fan-out."""
    with tempfile.TemporaryDirectory(prefix="paced-sides-", dir=directory) as tmp:
        uri = f"sqlite:///{tmp}/metadata.db?lease_seconds=5"
        with BookieCluster(3, Path(tmp) / "bookies", uri, **OURS) as cluster, LedgerClient(uri) as client:
            writer = client.create_ledger(3, 3, 2, password=PASSWORD)

            def framed_streams() -> list[int]:
                return [int(scrape(bookie.metrics_url).get(FRAMED_STREAMS, 0)) for bookie in cluster]
            yield (uri, {f"bookie-{index}": bookie.pid for index, bookie in enumerate(cluster)}, writer.ledger_id,
                   framed_streams)


@contextlib.contextmanager
def durable(directory: Path, seconds: float, rate: float):
    """3 durable servers (files preallocated for the run) registered as bookies with their framed add ports:
    (metadata URI, name -> pid, ledger id, a function that says how many framed add streams each took so far), where
    any ledger id will do (they keep no ledger state). A server that took an add stream over gRPC fails the run."""
    with tempfile.TemporaryDirectory(prefix="paced-sides-", dir=directory) as tmp, \
            durable_servers(3, Path(tmp), durable_file_room(seconds, rate)) as servers:
        with noop_registrations([port for _, port in servers], Path(tmp), "durable",
                                {port: process.add_port for process, port in servers}) as uri:

            def framed_streams() -> list[int]:
                figures = [sync_figures(port) for _, port in servers]
                if any(server.get("grpc_streams") for server in figures):
                    raise RuntimeError(f"a durable server took adds over gRPC, not its framed add port: {figures}")
                return [server.get("framed_streams", 0) for server in figures]
            pids = {f"durable-{index}": process.pid for index, (process, _) in enumerate(servers)}
            yield uri, pids, 1, framed_streams


def one_run(pair: str, directory: Path, seconds: float, rate: float) -> dict:
    """One paced run of ``pair`` on fresh servers: p50/p99 in ms to the second answer, CPU µs per add, and the
    framed add streams each server took during it. A server that took none fails the run: the adds went another
    way (over gRPC), which is not the path measured."""
    client, servers = pair.split("_over_")
    context = bookies(directory) if servers == "bookies" else durable(directory, seconds, rate)
    with context as (uri, pids, ledger_id, framed_streams):
        before = framed_streams()
        if client == "ours":  # its own ledger: the writer creates one
            run = client_run(uri, KiB, seconds, 1_000, rate, pids)
            figures = {"p50_ms": run["p50_ms"], "p99_ms": run["p99_ms"], "cpu_us_per_add": run["cpu_us_per_entry"]}
        else:
            run = fanout_run(uri, ledger_id, KiB, seconds, 1_000, pids, rate, method="paced fan-out", framed=True)
            figures = {"p50_ms": run["p50_ms_to_second_ack"], "p99_ms": run["p99_ms_to_second_ack"],
                       "cpu_us_per_add": run["cpu_us_per_entry"]}
        streams = [after - earlier for after, earlier in zip(framed_streams(), before)]
    if not all(streams):
        raise RuntimeError(f"{pair}: framed add streams per server during the run: {streams}; each must take one")
    return {**figures, "framed_add_streams": streams}


def summary(runs: list[dict]) -> dict:
    """Median and range of p50 and p99 over ``runs``."""
    out = {}
    for key in ("p50_ms", "p99_ms"):
        values = [run[key] for run in runs]
        out[key] = {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}
    return out


def run(directory: Path, seconds: float, repeats: int, rate: float) -> dict:
    runs: dict[str, list[dict]] = {pair: [] for pair in PAIRS}
    for round_number in range(repeats):
        order = PAIRS[round_number % len(PAIRS):] + PAIRS[:round_number % len(PAIRS)]
        for pair in order:
            load = round(os.getloadavg()[0], 2)
            runs[pair].append({**one_run(pair, directory, seconds, rate), "round": round_number,
                               "load_average_1m": load})
    return {"tool": "paced_sides", "directory": str(directory), "seconds_per_run": seconds, "repeats": repeats,
            "rate_per_s": rate, "pairs": {pair: {"runs": runs[pair], **summary(runs[pair])} for pair in PAIRS}}


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__)
    parser.number("--seconds", float, 8.0, help="length of each paced run")
    parser.number("--repeats", int, 3, help="rounds of the four pairs")
    parser.number("--rate", float, 1000.0, help="adds per second")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the bookies' and durable servers' files go (/dev/shm for tmpfs)")
    log_warnings()
    args = parser.parse_args(argv)
    return emit(run(args.dir, args.seconds, args.repeats, args.rate), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
