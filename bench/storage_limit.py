"""The storage engine's limits: its CPU per entry alone and the 1 KiB floor (``storage_cost``, ``floor_1kib``);
for 1 MiB appends, 3 bookies' storage engines at once on one disk, and the floor they and the fan-out set.

``three_storages(directory, size, entries, inflight)`` starts 3 processes (``spawn``: no gRPC thread is
forked), each with its own ``BookieStorage`` in a directory of its own under ``directory`` (so on the same
disk, as the 3 bookies of ``replication.py`` are), each given the same ``entries`` adds of ``size`` bytes
(encoded before the start, as a bookie gets them encoded), ``inflight`` at a time in batches of one (as
an AddStream delivers 1 MiB entries), durable (fsync'd) before an add counts. The 3 start together; the
rate is the entries per second until the second of them has stored every one: an add of E=Qw=3, Qa=2 is
confirmed by 2 of the 3 bookies while the third catches up (still writing to the same disk), so this is
what 3 replicas on this disk allow a writer with no network, no gRPC and no replication logic. The
slowest one's rate is reported too. Each process also reports its CPU (all its threads: the journal's,
the entry log's) per entry.

``floor_1mib(fanout, storages, size)`` is the rate no writer over these 3 bookies can pass on this
machine, the least of three limits each of which it must live within at once:

* the bare gRPC fan-out to 3 servers that store nothing (``grpc_fanout_limit``: the network part alone);
* the 3 storage engines on one disk (above: the disk and storage part alone);
* the CPU of both added up (the fan-out's client and servers per entry, plus 3 storage adds per entry)
  spread over every core, as ``floor_1kib`` does for 1 KiB.

Each part runs alone, so the floor is an upper bound: a writer pays all three at once on the same cores
and disk, and the real bound is lower.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import time
from pathlib import Path

MiB = 1024 * 1024
STORAGES = 3


def _encoded_adds(size: int, entries: int) -> list:
    """``entries`` adds of ``size`` random bytes to ledger 1, encoded as a client sends them."""
    from bookie_server.storage import AddOp
    from pyspark_ledger.entry import EntryCodec, master_key

    codec, key, data = EntryCodec(), master_key(b"bench"), os.urandom(size)
    return [AddOp(1, entry_id, key, codec.encode(1, entry_id, entry_id - 1, 0, data), False)
            for entry_id in range(entries)]


def _one_storage(directory: str, size: int, entries: int, inflight: int, start, results) -> None:
    """Child: encode ``entries`` adds, wait for the others, add them ``inflight`` at a time, report."""
    from bookie_server.storage import BookieStorage, StorageConfig
    from pyspark_ledger.wire.v1 import bookie_pb2 as pb

    adds = _encoded_adds(size, entries)
    storage = BookieStorage(StorageConfig(Path(directory)))
    try:
        start.wait(120)
        cpu, started = time.process_time(), time.perf_counter()
        pending = []
        for add in adds:
            if len(pending) >= inflight:
                statuses = pending.pop(0).result(120)
                if any(status != pb.OK for status in statuses):
                    raise RuntimeError(f"the storage refused an add: {statuses}")
            pending.append(storage.add_entries([add]))
        for future in pending:
            if any(status != pb.OK for status in future.result(120)):
                raise RuntimeError("the storage refused an add")
        results.put({"seconds": time.perf_counter() - started, "cpu_s": time.process_time() - cpu})
    except BaseException as exc:  # noqa: BLE001 - the parent must hear of it, not wait
        results.put({"error": repr(exc)})
        raise
    finally:
        storage.close()
        shutil.rmtree(directory, ignore_errors=True)


def storage_cost(directory: Path, size: int, entries: int, batch: int = 64) -> dict:
    """CPU per entry of a bookie's storage alone, in this process, no gRPC: ``entries`` adds in batches of
    ``batch`` (as an AddStream delivers them), durable (journal fsync'd) before the clock stops."""
    from bookie_server.storage import BookieStorage, StorageConfig
    from pyspark_ledger.wire.v1 import bookie_pb2 as pb

    adds = _encoded_adds(size, entries)
    storage = BookieStorage(StorageConfig(directory / f"storage-cost-{size}"))
    try:
        cpu, started = time.process_time(), time.perf_counter()
        pending = [storage.add_entries(adds[first:first + batch]) for first in range(0, entries, batch)]
        if any(status != pb.OK for future in pending for status in future.result()):
            raise RuntimeError("the storage refused adds")
        cpu, elapsed = time.process_time() - cpu, time.perf_counter() - started
    finally:
        storage.close()
    return {"entries": entries, "batch": batch, "entries_per_s": round(entries / elapsed),
            "cpu_us_per_entry": round(cpu / entries * 1e6, 1)}


def floor_1kib(result: dict) -> dict:
    """The least CPU any client over these bookies can spend per 1 KiB entry: the gRPC fan-out of the entry
    to 3 servers (client and servers, measured above) and 3 storage adds; and the rate that allows on
    these cores if they did nothing else, against the goal."""
    fanout = sum(result["limits"]["1KiB"]["grpc_fanout"]["cpu_us_per_entry"].values())
    storage = result["bookie_storage_alone"]["1KiB"]["cpu_us_per_entry"]
    total = fanout + 3 * storage
    cores = os.cpu_count() or 1
    return {"grpc_fanout_cpu_us_per_entry": round(fanout, 1), "storage_cpu_us_per_entry_per_bookie": storage,
            "cpu_us_per_entry_before_any_replication_logic": round(total, 1),
            "entries_per_s_if_all_cores_did_only_this": round(cores * 1e6 / total) if total else None}


def three_storages(directory: Path, size: int, entries: int, inflight: int, quorum: int = 2) -> dict:
    """3 storage engines in 3 processes, started together on ``directory``'s disk (see the module docstring)."""
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(STORAGES), context.Queue()
    processes = [context.Process(target=_one_storage, daemon=True, name=f"bench-storage-{index}",
                                 args=(str(directory / f"three-storages-{size}-{index}"), size, entries, inflight,
                                       start, results))
                 for index in range(STORAGES)]
    for process in processes:
        process.start()
    try:
        done = [results.get(timeout=300) for _ in processes]
    finally:
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join()
    errors = [one["error"] for one in done if "error" in one]
    if errors:
        raise RuntimeError(f"a storage process failed: {errors[0]}")
    finished = sorted(one["seconds"] for one in done)
    acked, slowest = finished[quorum - 1], finished[-1]
    return {"entries": entries, "inflight_per_storage": inflight, "storages": STORAGES, "ack_quorum": quorum,
            "entries_per_s": round(entries / acked, 1), "mb_per_s": round(entries * size / acked / 1e6, 1),
            "slowest_mb_per_s": round(entries * size / slowest / 1e6, 1),
            "cpu_us_per_entry_per_storage": round(sum(one["cpu_s"] for one in done) / STORAGES / entries * 1e6, 1),
            "method": f"{STORAGES} BookieStorage processes on one disk, {inflight} adds in flight each, fsync'd; "
                      f"rate until {quorum} of them stored every entry"}


def floor_1mib(fanout: dict, storages: dict, size: int) -> dict:
    """The floor for ``size``-byte appends from the fan-out and the 3 storages of the same run (module docstring)."""
    fanout_cpu = sum(fanout["cpu_us_per_entry"].values())
    cpu = fanout_cpu + STORAGES * storages["cpu_us_per_entry_per_storage"]
    cores = os.cpu_count() or 1
    cpu_mb_per_s = round(cores * 1e6 / cpu * size / 1e6, 1) if cpu else None
    parts = {"grpc_fanout": fanout["mb_per_s"], "three_storages_one_disk": storages["mb_per_s"],
             "cpu_of_both_on_all_cores": cpu_mb_per_s}
    bound = min((name for name, value in parts.items() if value), key=lambda name: parts[name])
    return {"mb_per_s": parts[bound], "bound_by": bound, "parts_mb_per_s": parts,
            "grpc_fanout_cpu_us_per_entry": round(fanout_cpu, 1),
            "storage_cpu_us_per_entry_per_bookie": storages["cpu_us_per_entry_per_storage"],
            "cpu_us_per_entry_before_any_replication_logic": round(cpu, 1)}
