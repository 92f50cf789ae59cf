"""``ledger demo``: a Spark streaming job over a local cluster, a bookie killed part-way, and a check.

Parses the flags, runs ``pyspark_ledger.demo.job.run_demo`` and prints its
summary (a table, or JSON with ``--json``: then the live progress goes to
stderr and stdout holds only the JSON document). Exit status: 0 only when
every committed event was read back exactly once with its content; 1 when
the check failed or the run failed; 2 for bad flags; 130 when interrupted
(Ctrl-C or SIGTERM), after stopping Spark and every bookie.
"""
from __future__ import annotations

import argparse
import sys

from pyspark_ledger.arg_types import number

EXIT_CHECK_FAILED = 1
EXIT_INTERRUPTED = 130
MIN_BOOKIES = 4


def add_parsers(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo", help="stream events with Spark into a local cluster, kill a bookie, read back and verify",
        description="Start a sandbox (4 bookies, SQLite metadata), run a Spark Structured Streaming job that "
                    "writes generated events into a 'ledger' stream, kill -9 one bookie while a ledger is being "
                    "written (the writer replaces it: an ensemble change), read everything back with readStream "
                    "(availableNow), check that no event is lost or duplicated, and print a summary. Exit status "
                    "0 only if the check passed. Needs the Spark extra: pip install -e '.[spark]'.")
    parser.add_argument("--duration", type=_duration, default=60.0, metavar="S",
                        help="seconds of streaming, counted from the first write (default 60; Spark's start "
                             "and the read-back take about a minute more)")
    parser.add_argument("--bookies", type=_bookies, default=MIN_BOOKIES, metavar="N",
                        help="number of bookies, at least 4 (default 4)")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="keep the cluster and Spark's log and checkpoints in DIR for inspection "
                             "(default: a temporary dir, removed at the end)")
    parser.add_argument("--rows-per-batch", type=_rows_per_batch, default=400_000, metavar="N",
                        help="generated events per micro-batch, 1000 to 10000000 (default 400000)")
    parser.add_argument("--cluster", default=None, metavar="FILE",
                        help="run against the cluster this file describes (ZooKeeper metadata, a Spark standalone "
                             "master; the cluster.json of python -m pyspark_ledger.testing.cluster up), from its "
                             "driver host, instead of a local sandbox and local Spark; see docs/cluster.md")
    parser.add_argument("--min-ack-quorum-zones", type=_ack_zones, default=1, metavar="M",
                        help="zones every ack quorum of the demo's ledgers must span (option minAckQuorumZones): 1 "
                             "(default, best spread) or 2 (refuse placements whose 2-bookie ack quorums could lie "
                             "in one zone; with E=Qw=3 that needs bookies in 3 zones, e.g. --cluster)")
    parser.add_argument("--no-kill", dest="kill", action="store_false",
                        help="do not kill a bookie (no ensemble change)")
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print the summary as JSON on stdout (progress goes to stderr)")
    parser.set_defaults(handler=cmd_demo)


_duration = number(float, lambda value: 5 <= value <= 3600, "must be a number of seconds from 5 to 3600, e.g. 60")
_rows_per_batch = number(int, lambda value: 1_000 <= value <= 10_000_000, "must be a whole number from 1000 to 10000000")
_ack_zones = number(int, lambda value: 1 <= value <= 2,
                    "must be 1 or 2: the demo's ledgers have an ack quorum of 2 (E=3, Qw=3, Qa=2), which spans at "
                    "most 2 zones")
_bookies = number(int, lambda value: value >= MIN_BOOKIES,
                  f"must be a whole number >= {MIN_BOOKIES}: ledgers are written to 3 bookies, so when one is "
                  "killed a 4th must be there to replace it (with 3, writes fail with not-enough-bookies)")


def cmd_demo(args: argparse.Namespace) -> int:
    from pyspark_ledger.demo.job import DemoConfig, run_demo  # late: keeps `ledger --help` fast
    from pyspark_ledger.demo.report import Reporter, print_summary, print_summary_json

    from pyspark_ledger.demo.interrupts import StopSignals

    as_json = bool(getattr(args, "json", False))
    reporter = Reporter(sys.stderr if as_json else sys.stdout)
    config = DemoConfig(duration_s=args.duration, bookies=args.bookies, data_dir=args.data_dir, kill=args.kill,
                        rows_per_batch=args.rows_per_batch, cluster_file=args.cluster,
                        min_ack_quorum_zones=args.min_ack_quorum_zones)
    with StopSignals() as stop:
        try:
            summary = run_demo(config, reporter, stop)
        except KeyboardInterrupt:
            stopped = "Spark was stopped; the cluster keeps running" if args.cluster else \
                "Spark and every bookie were stopped"
            reporter.say(f"ledger demo: interrupted; {stopped}")
            return EXIT_INTERRUPTED
    if as_json:
        print_summary(summary, sys.stderr)
        print_summary_json(summary, sys.stdout)
    else:
        print_summary(summary, sys.stdout)
    return 0 if summary.passed else EXIT_CHECK_FAILED
