"""When the paced tail happens: every add's latency beside the bookies' fsyncs, traced in the kernel.

Usage: ``python bench/paced_tail.py [--dir DIR] [--seconds 10] [--rate 1000] [--slow-ms 1.5] [--no-trace]
[--after-throughput SECONDS] [--out FILE]``.

A diagnosis tool, not one of ``python -m bench``'s benchmarks. The paced row of ``replication.py`` (1 KiB entries
at ``--rate``/s through ``LedgerClient``, E=Qw=3, Qa=2, 3 fresh bookies in ``--dir`` taking adds on their framed
add ports; with ``--after-throughput S``, after ``replication.py``'s 1 KiB and 1 MiB runs of S seconds each on the
same bookies, as its paced row comes after them) with each add's start and latency kept, on ``time.monotonic``
(CLOCK_MONOTONIC). Where ``perf`` can trace the whole machine (root), ``perf record -k CLOCK_MONOTONIC -a`` records
every ``fsync`` and ``fdatasync`` meanwhile, on the same clock, and the result says:

* ``latency``: p50, p90, p99, p99.9 and max, in ms;
* ``episodes``: adds slower than ``--slow-ms`` grouped into episodes (slow adds started less than 5 ms apart): how
  many, and the sizes of the largest -- a tail made by stalls comes in runs of adds, one made by each add's own
  cost does not;
* ``syncs`` (with the trace): each bookie's journal thread (the thread of the bookie's process with the most
  ``fdatasync`` calls) and every other thread of a bookie that synced (the journal's zeros, the metadata lease,
  start-up): calls and their duration's p50, p90, p99 and max;
* ``slowest`` (with the trace): of the slowest 1 % of adds, how many overlapped a journal ``fdatasync`` slower
  than ``SLOW_SYNC_S`` in at least 2 bookies (with an ack quorum of 2, an add waits for its second bookie), in at
  least 1, and a sync by another thread of a bookie; the same counts for the 1,000 adds around the median beside
  them.
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.cli import BenchParser, log_warnings  # noqa: E402
from bench.output import emit  # noqa: E402
from fanout_limits import KiB, PASSWORD, paced, percentile  # noqa: E402
from replication import OURS, SIZES, client_run  # noqa: E402
from pyspark_ledger.client import ClientConfig, LedgerClient  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster  # noqa: E402

EPISODE_GAP_S = 0.005  # slow adds started closer than this belong to one episode
SLOW_SYNC_S = 0.0008  # a journal fdatasync this slow is a stall (their p50 is 0.2-0.3 ms on this disk)
WARM_UP_ADDS = 2_000
SYNC_EVENTS = ("syscalls:sys_enter_fdatasync", "syscalls:sys_exit_fdatasync", "syscalls:sys_enter_fsync",
               "syscalls:sys_exit_fsync")


# --- the analysis (pure) ------------------------------------------------------------------------------------
def quantiles_ms(values: list[float]) -> dict:
    """p50, p90, p99, p99.9 and max of ``values`` (seconds), in ms; {} when there are none."""
    if not values:
        return {}
    return {name: round(percentile(values, fraction), 3)
            for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))}


def episodes(adds: list[tuple[float, float]], slow_s: float, gap_s: float = EPISODE_GAP_S) -> list[int]:
    """Sizes of the runs of slow adds: ``adds`` are (start, latency) in start order; adds slower than ``slow_s``
    whose starts are less than ``gap_s`` apart are one episode."""
    sizes: list[int] = []
    last = None
    for start, latency in adds:
        if latency <= slow_s:
            continue
        if last is not None and start - last < gap_s:
            sizes[-1] += 1
        else:
            sizes.append(1)
        last = start
    return sizes


def parse_syncs(lines) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """Each thread's (start, end) of every fsync/fdatasync, from ``perf script -F pid,tid,time,event`` lines
    ("  PID/TID  SECONDS: syscalls:sys_enter_fdatasync: ..."); lines of other shapes are skipped."""
    entered: dict[int, float] = {}
    syncs: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for line in lines:
        fields = line.split()
        if len(fields) < 3 or "/" not in fields[0]:
            continue
        try:
            pid, tid = map(int, fields[0].split("/"))
            at = float(fields[1].rstrip(":"))
        except ValueError:
            continue
        event = fields[2].rstrip(":")
        if event.startswith("syscalls:sys_enter_f"):
            entered[tid] = at
        elif event.startswith("syscalls:sys_exit_f") and tid in entered:
            syncs[(pid, tid)].append((entered.pop(tid), at))
    return dict(syncs)


def journal_threads(syncs: dict[tuple[int, int], list], pids: set[int]) -> dict[int, tuple[int, int]]:
    """Each bookie's journal thread: the thread of its process with the most syncs."""
    best: dict[int, tuple[int, int]] = {}
    for key, calls in syncs.items():
        if key[0] in pids and (key[0] not in best or len(calls) > len(syncs[best[key[0]]])):
            best[key[0]] = key
    return best


def _overlaps(start: float, end: float, intervals: list[tuple[float, float]]) -> bool:
    return any(begin < end and stop > start for begin, stop in intervals)


def stalls(adds: list[tuple[float, float]], syncs: dict[tuple[int, int], list], pids: set[int]) -> dict:
    """For the slowest 1 % of ``adds`` and the 1,000 around the median (the middle half of fewer): how many
    overlapped a journal fdatasync slower than ``SLOW_SYNC_S`` in at least 2 bookies, in at least 1, and a sync of
    another thread of a bookie."""
    journals = journal_threads(syncs, pids)
    others = [interval for key, calls in syncs.items() if key[0] in pids and key not in journals.values()
              for interval in calls]
    slow = [[(begin, end) for begin, end in syncs[key] if end - begin > SLOW_SYNC_S]  # a few % of each journal's
            for key in journals.values()]

    def count(group: list[tuple[float, float]]) -> dict:
        slow_journals = [sum(_overlaps(start, start + latency, journal) for journal in slow)
                         for start, latency in group]
        return {"adds": len(group),
                "slow_journal_sync_in_2_or_more_bookies": sum(n >= 2 for n in slow_journals),
                "slow_journal_sync_in_1_or_more": sum(n >= 1 for n in slow_journals),
                "another_bookie_thread_syncing": sum(_overlaps(start, start + latency, others)
                                                     for start, latency in group)}
    ranked = sorted(adds, key=lambda add: add[1])
    middle, half = len(ranked) // 2, min(1_000, len(ranked) // 2) // 2
    return {"slowest_1_percent": count(ranked[len(ranked) - max(1, len(ranked) // 100):]),
            "around_the_median": count(ranked[middle - half:middle + half])}


def sync_figures(syncs: dict[tuple[int, int], list], pids: set[int]) -> dict:
    """The bookies' journal threads' and other threads' syncs: calls and duration quantiles, in ms."""
    journals = journal_threads(syncs, pids)
    out = {}
    for index, pid in enumerate(sorted(journals)):
        calls = syncs[journals[pid]]
        out[f"bookie-{index} journal"] = {"calls": len(calls), **quantiles_ms([end - start for start, end in calls])}
    others = [end - start for key, calls in syncs.items() if key[0] in pids and key not in journals.values()
              for start, end in calls]
    out["bookies' other threads"] = {"calls": len(others), **quantiles_ms(others)}
    return out


def analyse(adds: list[tuple[float, float]], slow_s: float, syncs: dict | None, pids: set[int]) -> dict:
    """The result's figures from the adds (start, latency) and, if traced, the syncs (see the module docstring)."""
    sizes = episodes(adds, slow_s)
    result = {"adds": len(adds), "latency_ms": quantiles_ms([latency for _, latency in adds]),
              "slow_ms": round(slow_s * 1e3, 3), "slow_adds": sum(sizes),
              "episodes": {"count": len(sizes), "largest": sorted(sizes, reverse=True)[:10],
                           "median_size": statistics.median(sizes) if sizes else 0}}
    if syncs is not None:
        result["syncs"] = sync_figures(syncs, pids)
        result["slowest"] = stalls(adds, syncs, pids)
    return result


# --- the run ------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def can_trace() -> str | None:
    """Why the fsyncs cannot be traced here (None if they can): ``perf``, root, and the syscall tracepoints are
    needed; a short ``perf record`` of them tells."""
    if shutil.which("perf") is None:
        return "perf is not installed"
    if os.geteuid() != 0:
        return "tracing the whole machine needs root"
    with tempfile.TemporaryDirectory(prefix="paced-tail-probe-") as tmp:
        events = [argument for event in SYNC_EVENTS for argument in ("-e", event)]
        try:
            probe = subprocess.run(["perf", "record", "-q", "-a", *events, "-o", f"{tmp}/probe.data", "--", "true"],
                                   capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"perf record cannot run: {exc}"
    if probe.returncode != 0:
        return f"perf record cannot trace the syncs here: {probe.stderr.strip()[:200]}"
    return None


def start_trace(path: Path) -> subprocess.Popen:
    events = [argument for event in SYNC_EVENTS for argument in ("-e", event)]
    process = subprocess.Popen(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-a", *events, "-o", str(path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # perf needs a moment to open its events on every core
    if process.poll() is not None:
        raise RuntimeError(f"perf record failed: {process.stderr.read().decode(errors='replace').strip()}")
    return process


def stop_trace(process: subprocess.Popen, path: Path) -> list[str]:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise RuntimeError("perf record did not stop within 60 s") from None
    script = subprocess.run(["perf", "script", "-i", str(path), "-F", "pid,tid,time,event"], capture_output=True,
                            text=True, timeout=300, check=True)
    return script.stdout.splitlines()


def paced_adds(writer, seconds: float, rate: float) -> list[tuple[float, float]]:
    """``rate``/s 1 KiB adds for ``seconds``: each add's (start, latency) on ``time.monotonic``, in start order.
    Every add must succeed."""
    data = os.urandom(KiB)
    adds: list[tuple[float, float]] = []
    last, sent = None, 0
    for sent in paced(time.perf_counter(), seconds, rate):
        started = time.monotonic()
        last = writer.append_async(data)
        last.add_done_callback(lambda future, started=started: adds.append((started, time.monotonic() - started)))
    if last is not None:
        last.result(timeout=60)  # confirmed in order: every add before it is too (or it raises)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(adds) < sent + 1:
        time.sleep(0.01)  # the last callbacks run on the network thread
    return sorted(adds)


def run(directory: Path, seconds: float, rate: float, slow_ms: float, trace: bool = True,
        after_throughput: float = 0.0) -> dict:
    why_not = can_trace() if trace else "--no-trace"
    before = {}
    with tempfile.TemporaryDirectory(prefix="paced-tail-", dir=directory) as tmp:
        uri = f"sqlite:///{tmp}/metadata.db?lease_seconds=5"
        with BookieCluster(3, Path(tmp) / "bookies", uri, **OURS) as cluster, \
                LedgerClient(uri, ClientConfig(max_inflight_adds=1_000)) as client:
            pids = {bookie.pid for bookie in cluster}
            for name, (size, inflight) in SIZES.items() if after_throughput else ():
                figures = client_run(uri, size, after_throughput, inflight)
                before[name] = {key: figures[key] for key in ("entries_per_s", "mb_per_s")}
            writer = client.create_ledger(3, 3, 2, password=PASSWORD)
            warm = [writer.append_async(os.urandom(KiB)) for _ in range(WARM_UP_ADDS)]
            warm[-1].result(timeout=60)
            tracer = start_trace(Path(tmp) / "syncs.data") if why_not is None else None
            try:
                adds = paced_adds(writer, seconds, rate)
            finally:
                lines = stop_trace(tracer, Path(tmp) / "syncs.data") if tracer is not None else None
            writer.close()
    result = {"tool": "paced_tail", "directory": str(directory), "seconds": seconds, "rate_per_s": rate,
              "load_average_1m": round(os.getloadavg()[0], 2), "traced": why_not is None,
              **({"after_throughput": {"seconds": after_throughput, **before}} if after_throughput else {}),
              **({} if why_not is None else {"not_traced_because": why_not}),
              **analyse(adds, slow_ms / 1e3, parse_syncs(lines) if lines is not None else None, pids)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__)
    parser.number("--seconds", float, 10.0, help="length of the paced run")
    parser.number("--rate", float, 1000.0, help="adds per second")
    parser.number("--slow-ms", float, 1.5, help="adds slower than this are counted into episodes")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the bookies' files go")
    parser.add_argument("--no-trace", action="store_true", help="do not trace the fsyncs (no perf, or not root)")
    parser.add_argument("--after-throughput", type=float, default=0.0, metavar="SECONDS",
                        help="first run replication.py's 1 KiB and 1 MiB runs this long on the same bookies "
                        "(default: 0, none)")
    log_warnings()
    args = parser.parse_args(argv)
    if args.after_throughput < 0:
        parser.error(f"--after-throughput must be 0 (none) or positive, got {args.after_throughput}")
    return emit(run(args.dir, args.seconds, args.rate, args.slow_ms, trace=not args.no_trace,
                    after_throughput=args.after_throughput), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
