"""Where a slow ``fdatasync`` spends its time, from a kernel trace: the device or the kernel's scheduling.

A diagnosis tool, not one of ``python -m bench``'s benchmarks. Record the ext4 and block tracepoints of the whole
machine while a paced run goes on, with the clock the probes of ``paced_stages.py`` use::

    perf record -k CLOCK_MONOTONIC -a -o trace.data -e ext4:ext4_sync_file_enter,ext4:ext4_sync_file_exit,\\
        block:block_rq_issue,block:block_rq_complete
    perf script -i trace.data -F comm,pid,tid,time,event,trace > trace.txt
    python bench/fsync_trace.py trace.txt PID [PID ...]

(the bookies' pids: ``paced_stages.py`` names them in its result as ``bookie_pids``). On a file system without a
journal (ext4 here has none: no ``/proc/fs/jbd2``) an ``fdatasync`` writes the file's dirty pages, then the
inode's block (its mtime changed), then asks the device to flush its cache; each step waits for the last. For
every ``fdatasync`` of the given processes slower than ``--slow-ms``, the time between its entry and its return
is cut into: CPU and queueing before each write, each write on the device (issue to completion), the wait until
the cache flush is dispatched (the block layer issues it from a kworker), the flush on the device, and the rest
(the thread woken and run again after the flush). Requests are matched to their completions by sector.
"""
from __future__ import annotations

import argparse
import bisect
import json
import sys
from collections import Counter, defaultdict


def parse(lines, pids: set[int]):
    """(completion times by sector, flush issue times, flush completion times, each thread's sync events)."""
    completed: dict[str, list[float]] = defaultdict(list)
    flush_issued: list[float] = []
    flush_completed: list[float] = []
    events: dict[int, list[tuple]] = defaultdict(list)
    for line in lines:
        fields = line.split()
        if len(fields) < 6:
            continue
        try:
            pid, tid = map(int, fields[1].split("/"))
            at = float(fields[2].rstrip(":"))
        except ValueError:  # a command name with spaces: not one of ours
            continue
        event, kind = fields[3], fields[5]
        if event == "block:block_rq_complete:":
            if kind.startswith("FF"):
                flush_completed.append(at)
            elif fields[7] != "0":
                completed[fields[7]].append(at)
        elif event == "block:block_rq_issue:":
            if kind.startswith("FF"):
                flush_issued.append(at)
            elif pid in pids:
                events[tid].append((at, "issue", kind, fields[8], int(fields[6])))
        elif pid in pids and event.startswith("ext4:ext4_sync_file_"):
            events[tid].append((at, "enter" if "enter" in event else "exit"))
    for times in completed.values():
        times.sort()
    return completed, sorted(flush_issued), sorted(flush_completed), events


def _first_after(times: list[float], at: float, limit: float) -> float:
    index = bisect.bisect_left(times, at)
    return times[index] if index < len(times) and times[index] <= limit else limit


def split(lines, pids: set[int], slow_s: float) -> dict:
    completed, flush_issued, flush_completed, events = parse(lines, pids)
    parts: Counter = Counter()
    total = slow = 0
    durations = []
    for thread_events in events.values():
        thread_events.sort()
        current = None
        for event in thread_events:
            if event[1] == "enter":
                current = (event[0], [])
            elif event[1] == "issue" and current is not None:
                current[1].append(event)
            elif event[1] == "exit" and current is not None:
                entered, requests = current
                current = None
                total += 1
                durations.append(event[0] - entered)
                if event[0] - entered > slow_s and requests:
                    slow += 1
                    parts.update(_cut(entered, event[0], requests, completed, flush_issued, flush_completed))
    durations.sort()
    pick = lambda f: round(durations[min(len(durations) - 1, int(f * len(durations)))] * 1000, 3) if durations else None  # noqa: E731
    return {"fdatasyncs": total, "p50_ms": pick(0.5), "p99_ms": pick(0.99), f"slower_than_{slow_s * 1000:g}_ms": slow,
            "mean_ms_per_slow_one": {name: round(seconds / slow * 1000, 2) for name, seconds in parts.most_common()}
            if slow else {}}


def _cut(entered: float, returned: float, requests, completed, flush_issued, flush_completed) -> Counter:
    parts: Counter = Counter()
    last = entered
    for issued, _, kind, sector, size in requests:
        what = "data write" if kind == "WS" else "inode write" if kind == "WSM" else kind
        if size >= 1 << 20:
            what += " of 1 MiB or more"
        done = _first_after(completed.get(sector, []), issued, returned)
        parts[f"CPU and queueing before the {what}"] += max(0.0, issued - last)
        parts[f"{what} on the device"] += done - issued
        last = max(last, done)
    flush = _first_after(flush_issued, last, returned)
    if flush < returned:
        parts["wait until the cache flush is dispatched"] += flush - last
        last = _first_after(flush_completed, flush, returned)
        parts["cache flush on the device"] += last - flush
    parts["after the flush (thread woken and run)"] += returned - last
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="perf script output (comm,pid,tid,time,event,trace)")
    parser.add_argument("pids", nargs="+", type=int, help="the processes whose fdatasyncs to take apart")
    parser.add_argument("--slow-ms", type=float, default=5.0)
    args = parser.parse_args(argv)
    with open(args.trace) as lines:
        print(json.dumps(split(lines, set(args.pids), args.slow_ms / 1000), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
