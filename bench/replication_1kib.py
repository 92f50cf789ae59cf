"""The 1 KiB row of ``replication.py`` alone, with its limits and ratios: ``python bench/replication.py --only-1kib``.

In one run: the 1 KiB fan-out to 3 no-op servers, the CPU per entry of a bookie's storage alone, the 1 KiB
run (2,000 in flight) against 3 real bookies, the floor made of the first two (``storage_limit.floor_1kib``)
and ``ratios_1KiB``: ours ÷ the floor and ours ÷ the fan-out. For A/B comparisons of the 1 KiB add path,
where the full benchmark would spend minutes on rows that do not change.
"""
from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path

from fanout_limits import grpc_fanout_limit
from replication import ADD_PATH, OURS, SIZES, BookieCluster, client_run, cpu_bound, ratio, start_noop_servers
from storage_limit import floor_1kib, storage_cost


def run_1kib(seconds: float) -> dict:
    """Only the 1 KiB row and its limits (``--only-1kib``): the fan-out, the storage alone, ours, the ratios."""
    size, inflight = SIZES["1KiB"]
    result: dict = {"benchmark": "replication", "only": "1KiB", "cpus": os.cpu_count(),
                    "python": platform.python_version(), "ensemble": {"E": 3, "Qw": 3, "Qa": 2},
                    "seconds_per_run": seconds, "add_path": ADD_PATH,
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
                    "runs": {}, "limits": {"1KiB": {}}}
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp:
        directory = Path(tmp)
        servers = start_noop_servers(3)
        try:
            noop_pids = {f"noop-{index}": process.pid for index, (process, _) in enumerate(servers)}
            result["limits"]["1KiB"]["grpc_fanout"] = grpc_fanout_limit(
                [port for _, port in servers], directory, size, seconds / 2, inflight, noop_pids)
        finally:
            for process, _ in servers:
                process.kill()
                process.wait()
        result["bookie_storage_alone"] = {"1KiB": storage_cost(directory, size, 60_000)}
        uri = f"sqlite:///{directory}/metadata.db?lease_seconds=5"
        with BookieCluster(3, directory / "bookies", uri, **OURS) as cluster:
            pids = {f"bookie-{index}": bookie.pid for index, bookie in enumerate(cluster)}
            result["runs"]["1KiB"] = client_run(uri, size, seconds, inflight, servers=pids)
    floor = floor_1kib(result)
    ours = result["runs"]["1KiB"]["entries_per_s"]
    result["where_the_time_goes"] = {"1KiB": cpu_bound(result["runs"]["1KiB"]), "1KiB_floor": floor}
    result["ratios_1KiB"] = {
        "ours_entries_per_s": ours, "floor_entries_per_s": floor["entries_per_s_if_all_cores_did_only_this"],
        "fanout_entries_per_s": result["limits"]["1KiB"]["grpc_fanout"]["entries_per_s"],
        "ours_to_floor": ratio(ours, floor["entries_per_s_if_all_cores_did_only_this"] or 0),
        "ours_to_fanout": ratio(ours, result["limits"]["1KiB"]["grpc_fanout"]["entries_per_s"])}
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result
