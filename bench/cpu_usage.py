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

``ProcessGroups({"jvm": (pid, False), "python_workers": (pid, True), ...})``
splits a window's machine CPU by process: a group is one process alone
(``False``: its own threads) or a process's descendants (``True``: every
process below it, also those that started and ended inside the window, whose
CPU reaches their parent's counts when it reaps them); ``rest_of_machine`` is
what no group spent (other work on the machine, the kernel's own threads).
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


def _process_table() -> dict[int, tuple[int, float, float]]:
    """{pid: (parent pid, own CPU seconds, CPU seconds of its reaped children)} of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        table[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS,
                             (int(fields[13]) + int(fields[14])) / _TICKS)
    return table


def _below(table: Mapping[int, tuple[int, float, float]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _own, _reaped) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


class ProcessGroups:
    """The machine's CPU over a window, split by named process groups (see the module docstring)."""

    def __init__(self, groups: Mapping[str, tuple[int, bool]]) -> None:
        self._groups = dict(groups)

    def sample(self) -> tuple[float, dict[str, float]]:
        """(machine busy seconds, {group: CPU seconds so far}); differences of two samples split a window."""
        table = _process_table()
        spent = {}
        for name, (root, descendants) in self._groups.items():
            if descendants:  # the root's reaped children plus every live process below it with its own
                below = _below(table, root)
                spent[name] = table.get(root, (0, 0.0, 0.0))[2] + sum(table[pid][1] + table[pid][2] for pid in below)
            else:
                spent[name] = table.get(root, (0, 0.0, 0.0))[1]
        return machine_busy_seconds(), spent

    @staticmethod
    def split(before: tuple[float, dict[str, float]], after: tuple[float, dict[str, float]]) -> dict[str, float]:
        """CPU seconds of each group between two samples, and ``rest_of_machine``."""
        used = {name: round(after[1][name] - before[1][name], 2) for name in after[1]}
        used["rest_of_machine"] = round(after[0] - before[0] - sum(used.values()), 2)
        return used


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
