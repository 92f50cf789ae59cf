"""Same-run limits of the Spark goals: what any ``ledger`` read or write over the same Spark Python data source
path, transport and disk must pay, each part measured in the run (``bench/spark_io.py``). The transport is the one
ours takes: the bookies' framed port, for range reads (docs/protocol.md W12) and adds (W11) alike (from session
34 on; gRPC before, which made both limits slower than what ours had to pay).

A limit is an upper bound on speed, so each part is its cheapest honest figure: the fastest run for a wall
time, the run that cost the least CPU for a CPU time, and only the CPU of the processes doing the work (not
the rest of a shared machine).

The read of a stream's ``rows`` rows (``read_limit``) must at least

* do what the in-memory Arrow source's read of the same rows with the same schema does (``read_string``:
  Spark's JVM, its Python worker yielding Arrow batches): its fastest run's seconds, and its CPU;
* bring the stream's entry bytes from 3 servers (``bench/bare_fetch.py``: servers holding the entries in memory,
  answering range reads in our wire format on their framed ports' read connections, a fetcher that decodes
  answers in place and nothing more): its fastest run's seconds, and its CPU (fetcher and servers);
* fit the CPU of both on the machine's cores: (in-memory read CPU + bare fetch CPU) / cores seconds.

The write of the same rows (``write_limit``) must at least

* do what the in-memory sink does with the same rows (Spark reading the cached input, handing Arrow
  batches to its Python worker, which counts them): its fastest run's seconds, and its CPU;
* send the stream's entry bytes to 3 servers (the bare fan-out to no-op servers over their framed add ports,
  ``fanout_limits.grpc_fanout_limit``, with entries of the stream's mean entry size; its CPU per entry times
  the stream's entries, and the entries at its rate);
* store them with 3 bookies' storage engines at once on this disk (``storage_limit.three_storages``: the
  same number of entries of the same size, durable, until 2 of the 3 stored every entry): the disk-bound
  time, and its CPU (3 storage adds per entry);
* fit the CPU of all three on the machine's cores.

Each limit's time is the largest of its parts (each is paid in full by any implementation, so none can
be faster than the slowest part; the parts run alone, so paying them at once on the same cores is slower
still: the limit is an upper bound on speed, not a prediction).
"""
from __future__ import annotations

import os

#: ``cpu_by_process`` groups that are not the work's own: other work on the machine; the bookies idle
#: through the in-memory source's runs
NOT_OWN = ("rest_of_machine",)


def own_cpu(cpu_by_process: dict) -> float:
    """CPU seconds of the processes doing a Spark run's work (the JVM, its Python workers, the driver)."""
    return sum(value for name, value in cpu_by_process.items()
               if name not in NOT_OWN and not name.startswith("bookie-"))


def _cheapest(figures: dict) -> tuple[float, float]:
    """(the fastest run's seconds, the least own CPU of any run) of a ``spark_io.figures`` result. A run whose
    split by process is broken (None: a Python worker ended inside it, taking its CPU out of the tree) is
    left out; with none left, the median run's machine-wide CPU stands in (more than the work's own)."""
    seconds = min(figures.get("runs") or [figures["seconds"]])
    cpu = [value for value in figures.get("own_cpu_seconds_runs") or () if value is not None]
    return seconds, min(cpu) if cpu else figures["machine_cpu_seconds"]


def _bound(rows: int, parts: dict[str, float], cpu: dict[str, float]) -> dict:
    bound_by = max(parts, key=lambda name: parts[name])
    seconds = parts[bound_by]
    return {"seconds": round(seconds, 3), "rows_per_s": round(rows / seconds), "bound_by": bound_by,
            "parts_seconds": {name: round(value, 3) for name, value in parts.items()},
            "cpu_seconds": {name: round(value, 2) for name, value in cpu.items()}}


def read_limit(rows: int, in_memory_read: dict, fetch: dict, cores: int | None = None) -> dict:
    """The read's limit (module docstring) from the in-memory ``read_string`` figures and the bare fetch."""
    cores = cores or os.cpu_count() or 1
    memory_s, memory_cpu = _cheapest(in_memory_read)
    cpu = {"in_memory_read": memory_cpu, "bare_fetch": fetch["cpu_seconds"]}
    parts = {"in_memory_read": memory_s, "bare_fetch": fetch["seconds"],
             "cpu_of_all_parts_on_all_cores": sum(cpu.values()) / cores}
    return _bound(rows, parts, cpu)


def write_limit(rows: int, in_memory_write: dict, fanout: dict, storages: list[dict], entries: int,
                cores: int | None = None) -> dict:
    """The write's limit (module docstring) from the in-memory sink's figures, the bare fan-out (per entry) and
    the 3 storage engines' runs (each of ``entries`` entries)."""
    cores = cores or os.cpu_count() or 1
    memory_s, memory_cpu = _cheapest(in_memory_write)
    storage_cpu_us = min(run["cpu_us_per_entry_per_storage"] for run in storages)
    cpu = {"in_memory_write": memory_cpu, "bare_fanout": sum(fanout["cpu_us_per_entry"].values()) * entries / 1e6,
           "three_storages": 3 * storage_cpu_us * entries / 1e6}
    parts = {"in_memory_write": memory_s, "bare_fanout": entries / fanout["entries_per_s"],
             "three_storages_one_disk": min(entries / run["entries_per_s"] for run in storages),
             "cpu_of_all_parts_on_all_cores": sum(cpu.values()) / cores}
    return _bound(rows, parts, cpu)


def write_parts(directory, entries: int, entry_bytes: int, fanout_seconds: float, storage_repeats: int) -> dict:
    """The bare fan-out of entries of the stream's mean size for ``fanout_seconds``, and ``storage_repeats`` runs
    of 3 storage engines storing ``entries`` of them (``directory``: on the bookies' disk)."""
    from noop_bookies import start_noop_servers
    from fanout_limits import grpc_fanout_limit
    from storage_limit import three_storages

    size = max(1, round(entry_bytes / entries))
    servers = start_noop_servers(3, framed=True)  # the framed add ports: the transport ours' adds take (W11)
    try:
        fanout = grpc_fanout_limit([port for _, port in servers], directory, size, fanout_seconds, 8,
                                   servers={f"noop-{index}": process.pid for index, (process, _) in enumerate(servers)},
                                   method="framed AddStream fan-out to 3 no-op servers, all 3 acks per entry",
                                   add_ports={port: process.add_port for process, port in servers})
    finally:
        for process, _ in servers:
            process.kill()
            process.wait(30)
    storages = [three_storages(directory, size, entries, 8) for _ in range(storage_repeats)]
    return {"entry_size": size, "bare_fanout": fanout, "three_storages": storages}
