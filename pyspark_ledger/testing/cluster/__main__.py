"""``python -m pyspark_ledger.testing.cluster up|down|demo``: the test cluster by hand (needs root).

- ``up``: make the cluster, print its hosts and the commands to use it, and
  keep it until Ctrl-C or SIGTERM; then remove everything.
- ``demo``: make the cluster, run ``ledger demo --cluster`` on its driver host,
  remove the cluster; the demo's exit status.
- ``down``: remove what crashed runs left (namespaces whose owner process is
  gone), or with ``--prefix P --force`` the run ``P`` even if its owner lives.
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time

from pyspark_ledger.arg_types import number
from pyspark_ledger.testing.cluster import leftovers
from pyspark_ledger.testing.cluster.cluster import DRIVER_NICE, NetnsCluster
from pyspark_ledger.testing.cluster.netns import netns_unavailable_reason
from pyspark_ledger.testing.cluster.spec import default_spec

DEMO_TIMEOUT_S = 1800
_count = number(int, lambda value: 0 <= value <= 9, "must be a whole number from 0 to 9")
_bookie_count = number(int, lambda value: 0 <= value <= 50, "must be a whole number from 0 to 50")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pyspark_ledger.testing.cluster",
                                     description="A cluster of test hosts in network namespaces (needs root).")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("up", "make the cluster and keep it until Ctrl-C"),
                       ("demo", "make the cluster, run `ledger demo --cluster` on its driver host, remove it")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--zookeepers", type=_count, default=3, help="ZooKeeper hosts (default 3)")
        sub.add_argument("--bookies", type=_bookie_count, default=5, help="bookie hosts (default 5)")
        sub.add_argument("--workers", type=_count, default=2, help="Spark worker hosts (default 2)")
        sub.add_argument("--dir", default=None, help="keep logs and data here (default: a temporary dir, removed)")
    demo = commands.choices["demo"]
    demo.add_argument("demo_args", nargs=argparse.REMAINDER,
                      help="flags for ledger demo after --, e.g. -- --duration 20 --rows-per-batch 5000 --no-kill")
    down = commands.add_parser("down", help="remove the namespaces of runs whose owner process is gone")
    down.add_argument("--prefix", default=None, help="only this run (plc<pid>n<N>)")
    down.add_argument("--force", action="store_true", help="with --prefix: even if its owner still runs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    reason = netns_unavailable_reason()
    if reason:
        print(f"cannot make network namespaces: {reason}", file=sys.stderr)
        return 2
    if args.command == "down":
        return _down(args)
    spec = default_spec(args.zookeepers, args.bookies, args.workers)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    out = sys.stderr if args.command == "demo" else sys.stdout   # the demo's stdout is its own (--json)
    cluster = NetnsCluster(spec, args.dir, keep_dir=args.dir is not None,
                           on_step=lambda step: print(f"[{time.monotonic() - started:6.1f}s] {step} up", file=out,
                                                      flush=True))
    try:
        with cluster:
            _print_cluster(cluster, out)
            if args.command == "up":
                print("\nup; Ctrl-C removes everything", flush=True)
                while True:
                    time.sleep(3600)
            demo_args = [arg for arg in args.demo_args if arg != "--"]
            command = cluster.driver_command(["demo", "--cluster", str(cluster.cluster_file), *demo_args],
                                             nice=DRIVER_NICE)
            print("$ " + " ".join(command), file=out, flush=True)
            return subprocess.run(command, timeout=DEMO_TIMEOUT_S, stdin=subprocess.DEVNULL).returncode
    except KeyboardInterrupt:
        print("stopped; the cluster was removed", file=sys.stderr)
        return 130


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _down(args) -> int:
    if args.prefix:
        if leftovers.owner_alive(args.prefix) and not args.force:
            print(f"the owner of {args.prefix} still runs; add --force to remove it anyway", file=sys.stderr)
            return 1
        targets = [args.prefix]
    else:
        targets = leftovers.stale_prefixes()
    for prefix in targets:
        print(f"{prefix}: removed {', '.join(leftovers.clean_prefix(prefix)) or 'nothing'}")
    if not targets:
        print("nothing to remove")
    return 0


def _print_cluster(cluster: NetnsCluster, out) -> None:
    say = lambda text: print(text, file=out, flush=True)  # noqa: E731
    say(f"cluster {cluster.prefix} on {cluster.network.subnet}; its file: {cluster.cluster_file}")
    for host in cluster.hosts.values():
        running = ", ".join(f"{name} (pid {process.pid})" for name, process in host.processes.items())
        say(f"  {host.name:8} {host.address:15} {host.zone:7} {host.netns:24} {running or '-'}")
    say(f"metadataServiceUri = {cluster.metadata_uri}")
    say(f"Spark master       = {cluster.master_url}")
    if "driver" in cluster.hosts:
        say("the demo on the driver host:\n  " + " ".join(
            cluster.driver_command(["demo", "--cluster", str(cluster.cluster_file), "--duration", "30"])))


if __name__ == "__main__":
    sys.exit(main())
