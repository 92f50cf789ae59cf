"""CPU time of processes, for benchmarks that say where the time goes (Linux /proc).

``machine_busy_seconds()`` is the CPU time every process of the machine has
spent so far (all cores, from /proc/stat): the difference over a window, over
the window's length times the number of cores, is the share of the machine
that window kept busy -- for runs whose processes are many or short-lived
(Spark's JVM and Python workers).

``CpuMeter({"client": os.getpid(), "bookie-0": pid, ...})`` samples the user+system
CPU seconds of each process at ``start()``; ``per_item(count)`` gives the CPU
microseconds each one spent per item (entry) since then, and the machine's load
average, since other work on a shared machine changes every figure.
"""
from __future__ import annotations

import os
from typing import Mapping

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent outside idle and I/O wait since boot (user, nice, system, irq,
    softirq, steal)."""
    with open("/proc/stat") as handle:
        fields = handle.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICKS


class CpuMeter:
    """CPU per item of named processes over one measured window."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self._pids = dict(pids)
        self._start: dict[str, float] = {}

    def start(self) -> "CpuMeter":
        self._start = {name: cpu_seconds(pid) for name, pid in self._pids.items()}
        return self

    def per_item(self, count: int) -> dict:
        """{"cpu_us_per_entry": {name: µs}, "load_average_1m": x} since ``start()``."""
        used = {name: cpu_seconds(pid) - self._start[name] for name, pid in self._pids.items()}
        return {"cpu_us_per_entry": {name: round(seconds / max(count, 1) * 1e6, 1) for name, seconds in used.items()},
                "load_average_1m": round(os.getloadavg()[0], 2)}
