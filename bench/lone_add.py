"""Lone adds on one bookie: where its CPU goes, thread by thread (issue 16, paced latency).

One real bookie (``python -m bookie_server``) and one writer with an ensemble of one; adds of 1 KiB are
sent one at a time at ``--rate`` per second, each answered before the next is due, so every add finds the
bookie idle. Before that the bookie is left idle for ``--idle`` seconds. For each thread of the bookie the
run prints the CPU (user + system, and user alone) per add, the voluntary context switches per add (each
is one sleep, so one wake-up), and while idle the share of a core and the wake-ups per second. Thread
names come from ``py-spy dump`` when py-spy is installed (gRPC's C threads have none).

    python -m bench.lone_add --adds 1000 --rate 200 --idle 4

Figures are per process from /proc, at the clock tick's resolution (10 ms): over 1,000 adds that is
10 us per add. Load on a shared machine changes them: the load average is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.bookies import BookieProcess

_TICKS = os.sysconf("SC_CLK_TCK")


def thread_counters(pid: int) -> dict[int, tuple[float, float, int]]:
    """Per thread of ``pid``: (user+system CPU s, user CPU s, voluntary context switches)."""
    counters = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:  # the thread ended
            continue
        switches = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
        counters[int(tid)] = ((int(fields[11]) + int(fields[12])) / _TICKS, int(fields[11]) / _TICKS, switches)
    return counters


def thread_names(pid: int) -> dict[int, str]:
    """Python thread names by native thread id (empty without py-spy)."""
    if shutil.which("py-spy") is None:
        return {}
    dump = subprocess.run(["py-spy", "dump", "-p", str(pid)], capture_output=True, text=True, timeout=60).stdout
    names = {}
    for line in dump.splitlines():
        if line.startswith("Thread ") and '"' in line:
            try:
                names[int(line.split()[1], 0)] = line.split('"')[1]
            except ValueError:
                continue
    return names


def delta(before: dict, after: dict) -> dict[int, tuple]:
    return {tid: tuple(b - a for a, b in zip(before.get(tid, (0, 0, 0)), now)) for tid, now in after.items()}


def run(adds: int, rate: float, idle_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{tmp}/metadata.db?lease_seconds=5"
        with BookieProcess(Path(tmp) / "bookie", uri) as bookie, LedgerClient(uri) as client:
            writer = client.create_ledger(1, 1, 1, password=b"lone")
            for _ in range(20):  # the stream is open and warm
                writer.append(b"w" * 1024)
            time.sleep(1.0)
            before = thread_counters(bookie.pid)
            time.sleep(idle_s)
            idle = delta(before, thread_counters(bookie.pid))
            body, latencies = b"x" * 1024, []
            load = os.getloadavg()[0]
            before, started = thread_counters(bookie.pid), time.monotonic()
            for index in range(adds):
                pause = started + index / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                sent = time.perf_counter()
                writer.append(body)
                latencies.append(time.perf_counter() - sent)
            seconds = time.monotonic() - started
            busy = delta(before, thread_counters(bookie.pid))
            names = thread_names(bookie.pid)
            writer.close()
    latencies.sort()
    threads = [{"tid": tid, "name": names.get(tid, "?"), "cpu_us_per_add": round(cpu / adds * 1e6),
                "user_us_per_add": round(user / adds * 1e6), "wakeups_per_add": round(switches / adds, 2),
                "idle_core_percent": round(idle.get(tid, (0, 0, 0))[0] / idle_s * 100, 2),
                "idle_wakeups_per_s": round(idle.get(tid, (0, 0, 0))[2] / idle_s, 1)}
               for tid, (cpu, user, switches) in sorted(busy.items(), key=lambda item: -item[1][0])]
    return {"adds": adds, "rate": rate, "seconds": round(seconds, 2), "load_average_at_start": load,
            "cpu_us_per_add": round(sum(cpu for cpu, _, _ in busy.values()) / adds * 1e6),
            "wakeups_per_add": round(sum(s for _, _, s in busy.values()) / adds, 1),
            "idle_wakeups_per_s": round(sum(s for _, _, s in idle.values()) / idle_s, 1),
            "p50_ms": round(latencies[adds // 2] * 1e3, 2), "p99_ms": round(latencies[int(adds * 0.99)] * 1e3, 2),
            "threads": threads}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adds", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=200.0, help="adds per second (default 200)")
    parser.add_argument("--idle", type=float, default=4.0, help="seconds idle before the adds (default 4)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.adds, args.rate, args.idle), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
