"""The ``ledger sandbox`` sub-command: a local cluster in the foreground until Ctrl-C.

Prints one line per bookie as it comes up, then the metadataServiceUri with
copy-paste examples, then waits. SIGINT or SIGTERM stops every bookie
(SIGTERM, so they checkpoint), then ZooKeeper, and exits 0. A bookie that
dies on its own is reported and the others keep running. The cluster itself
is ``pyspark_ledger.sandbox.Sandbox``; this module only parses, prints and waits.
"""
from __future__ import annotations

import argparse
import shlex
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from pyspark_ledger.arg_types import number
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.sandbox.layout import MAX_ZONES

EXIT_INTERRUPTED = 130
_WATCH_INTERVAL_S = 0.2


def add_parsers(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "sandbox", help="run a local cluster (metadata + bookies) in the foreground",
        description="Run a local cluster in the foreground: embedded SQLite metadata (or a local ZooKeeper) "
                    "and N bookie processes on free 127.0.0.1 ports. Ctrl-C stops everything. Starting again "
                    "on the same --data-dir brings back the same bookies with their data.")
    parser.add_argument("--bookies", type=_bookie_count, default=None, metavar="N",
                        help="number of bookies (default: as many as --data-dir holds, else 3)")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="keep the cluster in DIR (default: a temporary dir, removed on exit)")
    parser.add_argument("--zookeeper", action="store_const", const=True, default=None,
                        help="keep metadata in a local ZooKeeper (needs `apt-get install zookeeper`) instead "
                             "of an embedded SQLite file")
    parser.add_argument("--tls", action="store_true",
                        help="mutual TLS: make a throwaway CA and certificates in the data dir, start every bookie "
                             "with them, and print the LEDGER_TLS_* variables clients need")
    parser.add_argument("--zones", type=_zone_count, default=None, metavar="N",
                        help=f"spread the bookies round-robin over N zones (zone-a, zone-b, ...; bookie i in zone i "
                             f"mod N, started with --zone), 1 to {MAX_ZONES} and at most the bookies, for zone-aware "
                             "placement (docs/protocol.md P1-P4); default: as --data-dir remembers, else no zones")
    parser.set_defaults(handler=cmd_sandbox)


_zone_count = number(int, lambda value: 1 <= value <= MAX_ZONES, f"must be a whole number from 1 to {MAX_ZONES}")
_bookie_count = number(int, lambda value: value >= 1,
                       "must be a whole number >= 1 (a cluster needs at least one bookie)")


def cmd_sandbox(args: argparse.Namespace) -> int:
    from pyspark_ledger.sandbox import Sandbox  # late: keeps `ledger --help` fast

    sandbox = Sandbox(args.bookies, args.data_dir, args.zookeeper, announce=_say, tls=args.tls, zones=args.zones)
    with _stop_signals() as stop_requested:
        try:
            sandbox.start()
        except LedgerError:
            if stop_requested.is_set():
                _say("sandbox: interrupted while starting; everything it started is stopped")
                return EXIT_INTERRUPTED
            raise
        try:
            _say(banner(sandbox))
            _watch(sandbox, stop_requested)
            _say("sandbox: stopping the bookies" + (" and ZooKeeper" if sandbox.zookeeper else ""))
        finally:
            sandbox.stop()
    _say("sandbox: stopped")
    return 0


def banner(sandbox) -> str:
    """The block printed once the cluster is up: URI, shell and PySpark examples."""
    uri = sandbox.metadata_uri
    kind = "ZooKeeper" if sandbox.zookeeper else "SQLite"
    kept = "temporary: removed on exit; pass --data-dir to keep it" if sandbox.temporary else \
        "kept: start again with the same --data-dir"
    tls_env = sandbox.tls_env
    security = ", mutual TLS" if tls_env else ""
    options = {"tlsCa": "LEDGER_TLS_CA", "tlsCert": "LEDGER_TLS_CERT", "tlsKey": "LEDGER_TLS_KEY"}
    return "\n".join([
        "",
        f"sandbox ready: {len(sandbox.bookies)} bookies{_in_zones(sandbox)}, {kind} metadata{security}, data in "
        f"{sandbox.data_dir} ({kept})",
        *_zone_lines(sandbox),
        "",
        f"  metadataServiceUri = {uri}",
        "",
        f"  export LEDGER_METADATA={shlex.quote(uri)}",
        *([f"  export LEDGER_REPAIR_KEY={shlex.quote(str(sandbox.repair_key_file))}"]
          if sandbox.repair_key_file else []),
        *[f"  export {name}={shlex.quote(value)}" for name, value in tls_env.items()],
        f"  ledger --metadata {shlex.quote(uri)} bookies",
        "",
        "  # PySpark",
        '  df = (spark.read.format("ledger")',
        f"        .option(\"metadataServiceUri\", \"{uri}\")",
        *[f"        .option(\"{option}\", \"{tls_env[name]}\")" for option, name in options.items() if name in tls_env],
        '        .option("stream", "events")',
        "        .load())",
        "",
        "Press Ctrl-C to stop.",
    ])


def _in_zones(sandbox) -> str:
    zones = sorted(set(sandbox.bookie_zones.values()))
    return f" in {len(zones)} zone{'s' if len(zones) != 1 else ''}" if zones else ""


def _zone_lines(sandbox) -> list[str]:
    by_zone: dict[str, list[str]] = {}
    for index, bookie_id in enumerate(sandbox.bookie_ids):
        zone = sandbox.bookie_zones.get(bookie_id)
        if zone:
            by_zone.setdefault(zone, []).append(f"bookie {index}")
    return [f"  {zone}: {', '.join(names)}" for zone, names in sorted(by_zone.items())]


def _watch(sandbox, stop_requested: threading.Event) -> None:
    """Wait for a stop signal; report bookies that die on their own meanwhile."""
    while not stop_requested.wait(_WATCH_INTERVAL_S):
        for index, bookie in sandbox.poll_exits():
            if stop_requested.is_set():
                return  # e.g. Ctrl-C reached the bookies too: not an unexpected death
            _say(f"sandbox: bookie {index} ({bookie.bookie_id}, pid {bookie.pid}) exited unexpectedly with status "
                 f"{bookie.returncode}; the other bookies keep running and `ledger bookies` drops it once its "
                 f"lease expires. Its log: {bookie.data_dir / 'bookie-stderr.log'}")


@contextmanager
def _stop_signals() -> Iterator[threading.Event]:
    """SIGINT/SIGTERM set an event instead of killing us half-way; previous handlers restored after."""
    stop_requested = threading.Event()
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        signal.signal(signum, lambda _signum, _frame: stop_requested.set())
    try:
        yield stop_requested
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _say(line: str) -> None:
    print(line, flush=True)
