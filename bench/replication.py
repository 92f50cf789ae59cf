"""Benchmark the replication client: 3 bookies, E=Qw=3, Qa=2, against two limits measured in the same run.

Usage: ``python bench/replication.py [--seconds 6] [--only-1kib | --paced-only] [--out FILE]``.

``--only-1kib`` runs only what the 1 KiB goal needs, in one run (``replication_1kib.py``): the 1 KiB
fan-out, the storage's CPU per entry, the 1 KiB run against 3 bookies, and ``ratios_1KiB`` (ours ÷ the
floor, ours ÷ the fan-out) -- for A/B comparisons of the 1 KiB path. ``--paced-only`` runs only the paced
1,000 x 1 KiB/s rows, on fresh bookies, for A/B comparisons of latency.

Starts 3 real bookie processes (SQLite metadata in a temporary directory; each with ``--add-port 0``, so the
client's adds take their framed add ports, docs/protocol.md W11: ``OURS``, ``ADD_PATH`` in the JSON) and
writes through ``LedgerClient`` with many adds in flight: 1 KiB and 1 MiB
entries (throughput, p50/p99 latency from ``append_async`` to confirmation),
and a paced run of 1 KiB entries at 1,000 entries/s (p50/p99). In the same
run, on the same machine, it measures limits for the same bytes (``fanout_limits.py``):

* ``fsync``: 3 threads, each appending the entries to its own file with one
  fsync per write of up to 1 MiB (an ideal group-committing journal);
* ``paced_1KiB_1000_per_s.fsync``: the paced fsync floor (``paced_fsync.py``): 1 KiB records paced at
  1,000/s to 3 files, each with a group-committing writer thread (append, fdatasync), latency to the
  second durable copy -- what an add fsync'd on 2 of 3 bookies before its ack cannot beat on this disk;
* ``grpc_fanout``: the encoded entries sent with the client's AddStream to 3
  servers of the same proto that store nothing (``noop_bookies.py``),
  each entry done once all 3 acknowledged; for 1 KiB also paced at 1,000
  entries/s, with its latency to the second ack and CPU per entry: gRPC's
  share of the paced goal, with no replication logic and no storage. Paced, it runs twice, sending each add
  at once and with ours' window of AddBatches in flight (docs/protocol.md W10), and the run with the lower
  p99 is the limit (both in ``runs``; ``fanout_limits.paced_fanout_limit``);
* ``paced_1KiB_1000_per_s.grpc_fanout_durable``: the same paced fan-out to 3 servers that make each add
  durable before answering it and do nothing else (``durable_bookies.py``: the bodies written to a preallocated
  file per server in a fresh directory beside the bookies', one fdatasync per group commit): what any durable
  server over this transport and disk cannot beat; run before and after the paced run against bookies, each
  time both ways as the bare fan-out, the one with the lowest p99 kept (all 4 in ``runs``); where /dev/shm is a
  tmpfs, also with its files there
  (``grpc_fanout_durable_tmpfs``: the same CPU, fdatasync free), which splits the disk's share from the CPU's.

It also runs the client against those 3 no-op servers, which separates the
client's own cost from the bookies' -- at full speed, and paced at 1,000
entries/s, where the latency and CPU per entry of gRPC alone are the floor
under the paced run against bookies. ``bookie_storage_alone`` is the CPU per
1 KiB entry of a bookie's storage engine driven in this process (no gRPC), and
``where_the_time_goes["1KiB_floor"]`` adds 3 of those to the fan-out's CPU per
entry (client and servers): the CPU any client must cost per entry over these
bookies before any replication logic, and the rate that leaves on these
cores. For 1 MiB, ``limits["1MiB"]["three_storages"]`` runs 3 bookies' storage engines at once, one process
each, on this disk with the same entries (``storage_limit.py``), and ``where_the_time_goes["1MiB_floor"]`` is the
least of the fan-out, those 3 storages, and the rate the CPU of both allows on all cores. Each run against
bookies reports the CPU
microseconds per entry of the client process (with this driver) and of each
bookie, and ``where_the_time_goes`` the rate that CPU would allow if every
core did nothing else; the paced run is repeated against bookies started with
``--journal-write-data`` (every body copied into the journal; by default only
bodies up to 64 KiB are, larger ones are journaled by reference), and, where /dev/shm is a tmpfs, against 3
fresh bookies whose directories are there (``paced_1KiB_1000_per_s_tmpfs``: fdatasync costs nothing, so
nothing is durable; a labelled extra row, what the disk adds to the real run). Each paced run against bookies
also reports what their journals did meanwhile (``journals``, from their /metrics: commits/s, records per
commit, fsync time, the bookie's own received-to-durable latency; ``bookie_journal.py``). Prints one JSON
document (and writes it with ``--out``). Everything
shares the machine: bookies, client, servers and whatever else runs there
(see the load averages).
"""
from __future__ import annotations

import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.cli import BenchParser, log_warnings  # noqa: E402
from bench.output import emit  # noqa: E402

from bookie_journal import JournalWatch  # noqa: E402
from cpu_usage import CpuMeter  # noqa: E402
from paced_fsync import paced_group_commits  # noqa: E402
from storage_limit import floor_1kib, floor_1mib, storage_cost, three_storages  # noqa: E402
from durable_bookies import lowest_p99  # noqa: E402
from fanout_limits import (KiB, MiB, PASSWORD, durable_fanout_runs, fsync_limit,  # noqa: E402
                           grpc_fanout_limit, paced, paced_fanout_limit, percentile)
from noop_bookies import noop_registrations, start_noop_servers  # noqa: E402
from pyspark_ledger.client import ClientConfig, LedgerClient  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster  # noqa: E402

SIZES = {"1KiB": (KiB, 2_000), "1MiB": (MiB, 8)}  # payload bytes, adds in flight
GOALS = {"1KiB_entries_per_s": 20_000, "1MiB_ratio_to_lower_limit": 0.6, "paced_p99_ms": 5.0}
TMPFS = Path("/dev/shm")  # where Linux mounts a tmpfs: fdatasync there returns at once
# Our bookies take adds on their framed add port (docs/protocol.md W11), which the client uses when a bookie
# registers one: the add path without gRPC. The limits keep gRPC (they are what the issue names).
OURS = {"add_port": 0}
ADD_PATH = "framed TCP: bookies started with --add-port 0, ClientConfig.framed_adds (docs/protocol.md W11)"


# --- measurements ---------------------------------------------------------------------------------
def drive_writer(writer, size: int, seconds: float, inflight: int, rate: float | None = None) -> dict:
    """Append ``size``-byte entries for ``seconds`` (paced at ``rate``/s, else as fast as allowed), at most
    ``inflight`` unconfirmed: the writer's own limit (``ClientConfig.max_inflight_adds``, which must be
    ``inflight``), under which ``append_async`` blocks, as a user's loop relies on it; no window of the driver's
    own (from the run after 7be262b on; a ``threading.BoundedSemaphore`` before, taken and given back across
    threads once per add). Each add's latency runs from just before its ``append_async`` call, so a wait for
    room counts in it.

    Every add must succeed. That is checked once, at the end, as the fan-out limit checks its acks (no
    per-entry cost beyond counting): the writer confirms entries in order and fails every add after one that
    failed, so all ``count`` adds succeeded exactly when its last add confirmed is the last id sent."""
    if writer.max_inflight_adds != inflight:
        raise ValueError(f"the writer allows {writer.max_inflight_adds} adds in flight, the run asks for {inflight}: "
                         f"open its client with ClientConfig(max_inflight_adds={inflight})")
    data = os.urandom(size)
    latencies: list[float] = []
    first = writer.last_add_confirmed + 1
    started = time.perf_counter()
    count, last = 0, None
    for count in paced(started, seconds, rate):
        now = time.perf_counter()
        last = writer.append_async(data)
        last.add_done_callback(lambda _future, now=now: latencies.append(time.perf_counter() - now))
        count += 1  # after the loop: how many were sent
    if last is not None:
        last.exception()  # waits until the last add is done (confirmed in order: then every add is), raises nothing
    elapsed = time.perf_counter() - started
    deadline = time.monotonic() + 10.0
    while len(latencies) < count and time.monotonic() < deadline:  # the last callbacks run on the network thread
        time.sleep(0.001)
    confirmed = writer.last_add_confirmed + 1 - first
    if confirmed != count:
        raise RuntimeError(f"{count - confirmed} of {count} adds were not confirmed (last add confirmed: "
                           f"{writer.last_add_confirmed}, first id sent: {first})")
    return {"entries": count, "seconds": round(elapsed, 3), "entries_per_s": round(count / elapsed),
            "mb_per_s": round(count * size / elapsed / 1e6, 1), "p50_ms": round(percentile(latencies, 0.5), 3),
            "p99_ms": round(percentile(latencies, 0.99), 3)}


def client_run(uri: str, size: int, seconds: float, inflight: int, rate: float | None = None,
               servers: dict[str, int] | None = None, bookies=None) -> dict:
    """One writer's run; with ``servers`` (name -> pid) also the CPU per entry of each and of this process; with
    ``bookies`` (a ``BookieCluster``) also what their journals did meanwhile (``bookie_journal``)."""
    with LedgerClient(uri, ClientConfig(max_inflight_adds=max(inflight, 1))) as client:
        writer = client.create_ledger(3, 3, 2, password=PASSWORD)
        meter = CpuMeter({"client": os.getpid(), **(servers or {})}).start()
        watch = JournalWatch(bookies).start() if bookies is not None else None
        result = drive_writer(writer, size, seconds, inflight, rate)
        result.update(meter.per_item(result["entries"]))
        if watch is not None:
            result["journals"] = watch.stop(result["seconds"])
        writer.close()
    return result


def cpu_bound(run: dict) -> dict:
    """Where the time of a run went: CPU per entry of all processes, the rate that CPU allows, and the
    share of all cores the run kept busy (near 1: every process waits for a core, and latency grows)."""
    total = sum(run["cpu_us_per_entry"].values())
    cores = os.cpu_count() or 1
    return {"cpu_us_per_entry_all_processes": round(total, 1),
            "entries_per_s_if_all_cores_did_only_this": round(cores * 1e6 / total) if total else None,
            "share_of_all_cores_busy": round(total * run["entries_per_s"] / (cores * 1e6), 2)}


def client_over_noop(ports: list[int], directory: Path, size: int, seconds: float, inflight: int,
                     rate: float | None = None, servers: dict[str, int] | None = None) -> dict:
    with noop_registrations(ports, directory, f"{size}-{rate}") as uri:
        return client_run(uri, size, seconds, inflight, rate, servers)


def is_tmpfs(path: Path) -> bool:
    """Whether ``path`` is the mount point of a tmpfs (from /proc/mounts)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    return any(fields[1:3] == [str(path), "tmpfs"] for fields in (line.split() for line in mounts))


def ratio(value: float, limit: float) -> float:
    return round(value / limit, 2) if limit else float("nan")


def run(seconds: float, paced_only: bool = False) -> dict:
    """The whole benchmark; with ``paced_only`` only the rows of the paced 1,000 x 1 KiB/s run (its fan-out, the
    client over no-op servers, the paced fsync floor, fresh bookies on the disk and on tmpfs), for A/B runs."""
    result: dict = {"benchmark": "replication", "cpus": os.cpu_count(), "python": platform.python_version(),
                    "ensemble": {"E": 3, "Qw": 3, "Qa": 2}, "seconds_per_run": seconds,
                    "note": "bookies, client and no-op servers share this machine's cores", "add_path": ADD_PATH,
                    "bookie_journal": "default: references (each entry body written once, to the entry log)",
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "runs": {},
                    "limits": {}, "client_over_noop_servers": {}}
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp:
        directory = Path(tmp)
        servers = start_noop_servers(3)
        try:
            ports = [port for _, port in servers]
            noop_pids = {f"noop-{index}": process.pid for index, (process, _) in enumerate(servers)}
            for name, (size, inflight) in ({} if paced_only else SIZES).items():
                result["limits"][name] = {
                    "fsync": fsync_limit(directory, size, 20_000 if size == KiB else 200),
                    "grpc_fanout": grpc_fanout_limit(ports, directory, size, seconds / 2, inflight, noop_pids)}
                result["client_over_noop_servers"][name] = client_over_noop(ports, directory, size, seconds / 2,
                                                                            inflight)
            result["limits"]["paced_1KiB_1000_per_s"] = {
                "grpc_fanout": paced_fanout_limit(ports, directory, seconds, noop_pids)}
            durable_before = durable_fanout_runs(directory, seconds, "before ours")
            result["client_over_noop_servers"]["paced_1KiB_1000_per_s"] = client_over_noop(
                ports, directory, KiB, seconds, 1_000, 1000.0, noop_pids)
        finally:
            for process, _ in servers:
                process.kill()
                process.wait()
        result["limits"]["paced_1KiB_1000_per_s"]["fsync"] = paced_group_commits(directory, seconds=seconds)
        if not paced_only:
            result["bookie_storage_alone"] = {"1KiB": storage_cost(directory, KiB, 60_000)}
            result["limits"]["1MiB"]["three_storages"] = three_storages(directory, MiB, 192, SIZES["1MiB"][1])
        uri = f"sqlite:///{directory}/metadata.db?lease_seconds=5"
        with BookieCluster(3, directory / "bookies", uri, **OURS) as cluster:
            pids = {f"bookie-{index}": bookie.pid for index, bookie in enumerate(cluster)}
            for name, (size, inflight) in ({} if paced_only else SIZES).items():
                result["runs"][name] = client_run(uri, size, seconds, inflight, servers=pids)
            result["runs"]["paced_1KiB_1000_per_s"] = client_run(uri, KiB, seconds, 1_000, 1000.0, pids, cluster)
        result["limits"]["paced_1KiB_1000_per_s"]["grpc_fanout_durable"] = lowest_p99(  # once more each way, after ours
            durable_before + durable_fanout_runs(directory, seconds, "after ours"), "when")
        if not paced_only:
            uri = f"sqlite:///{directory}/metadata-write-data.db?lease_seconds=5"
            with BookieCluster(3, directory / "bookies-write-data", uri, journal_write_data=True, **OURS) as cluster:
                pids = {f"bookie-{index}": bookie.pid for index, bookie in enumerate(cluster)}
                result["runs"]["paced_1KiB_1000_per_s_journal_write_data"] = client_run(uri, KiB, seconds, 1_000,
                                                                                        1000.0, pids, cluster)
    if is_tmpfs(TMPFS):  # the same paced run where fdatasync costs nothing: what the disk adds (not durable)
        with tempfile.TemporaryDirectory(prefix="bench-replication-", dir=TMPFS) as tmp:
            result["limits"]["paced_1KiB_1000_per_s"]["grpc_fanout_durable_tmpfs"] = lowest_p99(
                durable_fanout_runs(Path(tmp), seconds, "on tmpfs"), "when")  # fdatasync free: its CPU without its disk
            uri = f"sqlite:///{tmp}/metadata.db?lease_seconds=5"
            with BookieCluster(3, Path(tmp) / "bookies", uri, **OURS) as cluster:
                pids = {f"bookie-{index}": bookie.pid for index, bookie in enumerate(cluster)}
                result["runs"]["paced_1KiB_1000_per_s_tmpfs"] = client_run(uri, KiB, seconds, 1_000, 1000.0, pids,
                                                                           cluster)
    result["where_the_time_goes"] = {name: cpu_bound(run) for name, run in result["runs"].items()}
    if not paced_only:
        result["where_the_time_goes"]["1KiB_floor"] = floor_1kib(result)
        result["where_the_time_goes"]["1MiB_floor"] = floor_1mib(result["limits"]["1MiB"]["grpc_fanout"],
                                                                 result["limits"]["1MiB"]["three_storages"], MiB)
    result["where_the_time_goes"]["paced_1KiB_1000_per_s_grpc_fanout_alone"] = cpu_bound(
        result["limits"]["paced_1KiB_1000_per_s"]["grpc_fanout"])
    result["where_the_time_goes"]["paced_1KiB_1000_per_s_grpc_fanout_durable_alone"] = cpu_bound(
        result["limits"]["paced_1KiB_1000_per_s"]["grpc_fanout_durable"])
    noop_paced = result["client_over_noop_servers"].get("paced_1KiB_1000_per_s")
    if noop_paced is not None:  # the same paced load when the servers store nothing: gRPC's own share
        result["where_the_time_goes"]["paced_1KiB_1000_per_s_over_noop_servers"] = cpu_bound(noop_paced)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if not paced_only:
        result["goals"] = goals(result)
    return result


def goals(result: dict) -> dict:
    small = result["runs"]["1KiB"]["entries_per_s"]
    large_limits = result["limits"]["1MiB"]
    lower = min(large_limits["fsync"]["mb_per_s"], large_limits["grpc_fanout"]["mb_per_s"])
    large = ratio(result["runs"]["1MiB"]["mb_per_s"], lower)
    paced = result["runs"]["paced_1KiB_1000_per_s"]["p99_ms"]
    return {
        "1KiB_entries_per_s": {"goal": GOALS["1KiB_entries_per_s"], "measured": small,
                               "met": small >= GOALS["1KiB_entries_per_s"]},
        "1MiB_ratio_to_lower_limit": {"goal": GOALS["1MiB_ratio_to_lower_limit"], "measured": large,
                                      "lower_limit_mb_per_s": lower,
                                      "met": large >= GOALS["1MiB_ratio_to_lower_limit"]},
        "paced_p99_ms": {"goal": GOALS["paced_p99_ms"], "measured": paced, "met": paced <= GOALS["paced_p99_ms"]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__)
    parser.number("--seconds", float, 6.0, help="length of each measured run")
    parser.add_argument("--only-1kib", action="store_true",
                        help="only the 1 KiB row, its fan-out and storage limits, and its ratios (for A/B runs)")
    parser.add_argument("--paced-only", action="store_true",
                        help="only the paced 1,000 x 1 KiB/s rows, on fresh bookies (for A/B comparisons)")
    args = parser.parse_args(argv)
    if args.only_1kib and args.paced_only:
        parser.error("--only-1kib and --paced-only each run a part only: give one of them")
    log_warnings()
    logging.getLogger("pyspark_ledger.client.writer").setLevel(logging.INFO)  # why a bookie was replaced
    if args.only_1kib:
        from replication_1kib import run_1kib
        return emit(run_1kib(args.seconds), args.out)
    return emit(run(args.seconds, args.paced_only), args.out)


if __name__ == "__main__":
    sys.exit(main())
