"""Benchmark recovery: how long opening a ledger whose writer was killed takes until the ledger is closed.

Usage: ``python bench/recovery.py [--entries 100000] [--repeats 3] [--windows 1,256] [--quick] [--out FILE]``.

Starts 3 real bookie processes (SQLite metadata in a temporary directory). Each repetition starts a
writer in a subprocess (``python bench/recovery.py --writer URI ENTRIES``) that creates a ledger with
E=Qw=3, Qa=2 and appends entries of 100 bytes with 2,000 in flight; once ``--entries`` are confirmed
it says so and goes on appending, and is killed with SIGKILL right then, with adds in flight (no close;
the bookies know a last add confirmed that lags the writer's, as after a real crash). The
clock runs around ``LedgerClient.open_ledger(id, recovery=True)``: fencing, reading forward from the
last add confirmed the bookies know, writing back, and closing the ledger in the metadata store. The
ledger must then be CLOSED with every confirmed entry; each run also reports how many entries recovery
had to read forward past the last add confirmed the bookies knew (read before the clock starts, without
fencing). Each repetition recovers one killed writer's ledger per ``--windows`` value
(``ClientConfig.recovery_read_window``: 1 reads forward one entry at a time, as before the window
existed; the default reads a window of entries as range reads), interleaved. Median and range per
window over the repetitions; goal of issue 16: <= 1 s for 100,000 entries with the default window.
``--quick``: 20,000 entries, one repetition.
"""
from __future__ import annotations

import cProfile
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.cli import BenchParser  # noqa: E402
from bench.output import emit  # noqa: E402

from pyspark_ledger.client import ClientConfig, LedgerClient  # noqa: E402
from pyspark_ledger.testing.bookies import BookieCluster, child_env  # noqa: E402

PASSWORD = b"bench"
PAYLOAD = 100
GOAL_S = 1.0
INFLIGHT = 2_000
DEFAULT_WINDOW = ClientConfig().recovery_read_window


def writer_main(uri: str, entries: int) -> int:
    """The killed writer: create a ledger, print its id, append with many in flight, say "written" once
    ``entries`` are confirmed and keep appending until killed (a crash lands mid-stream)."""
    client = LedgerClient(uri, ClientConfig(max_inflight_adds=INFLIGHT))
    writer = client.create_ledger(3, 3, 2, password=PASSWORD)
    print(writer.ledger_id, flush=True)
    data = os.urandom(PAYLOAD)
    confirmed = [0]
    lock = threading.Lock()

    def done(future) -> None:
        if future.exception() is None:
            with lock:
                confirmed[0] += 1
    announced = False
    while True:  # append_async blocks while INFLIGHT adds are unconfirmed
        writer.append_async(data).add_done_callback(done)
        if not announced and confirmed[0] >= entries:
            print("written", flush=True)
            announced = True


def killed_writer(uri: str, entries: int) -> tuple[int, float]:
    """Run a writer to ``entries`` confirmed entries and SIGKILL it; its ledger id and write seconds."""
    command = [sys.executable, __file__, "--writer", uri, str(entries)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=child_env(), text=True)
    try:
        started = time.perf_counter()
        ledger_id = int(process.stdout.readline())
        if process.stdout.readline().strip() != "written":
            raise RuntimeError(f"the writer stopped before writing {entries} entries (exit {process.poll()})")
        return ledger_id, time.perf_counter() - started
    finally:
        process.kill()
        process.wait(timeout=30)


def recover_once(uri: str, entries: int, window: int, profile: Path | None = None) -> dict:
    ledger_id, write_s = killed_writer(uri, entries)
    with LedgerClient(uri, ClientConfig(recovery_read_window=window)) as client:
        tailing = client.open_ledger(ledger_id, PASSWORD, recovery=False)  # what the bookies knew: no fencing
        known = tailing.last_add_confirmed
        tailing.close()
        profiler = cProfile.Profile() if profile is not None else None
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        reader = client.open_ledger(ledger_id, PASSWORD, recovery=True)
        seconds = time.perf_counter() - started
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(str(profile.with_suffix(f".w{window}.prof")))
        reader.close()
        metadata = client.ledger_metadata(ledger_id)
    if not metadata.is_closed or metadata.last_entry_id < entries - 1:
        raise RuntimeError(f"ledger {ledger_id} after recovery: state {metadata.state}, last entry {metadata.last_entry_id}; "
                           f"{entries} entries were confirmed")
    return {"window": window, "ledger_id": ledger_id, "write_seconds": round(write_s, 2), "recovery_seconds": round(seconds, 3),
            "last_entry_id": metadata.last_entry_id, "last_add_confirmed_before": known,
            "entries_read_forward": metadata.last_entry_id - known}


def run(entries: int, repeats: int, windows: list[int], profile: Path | None = None) -> dict:
    result = {"benchmark": "recovery", "cpus": os.cpu_count(), "python": platform.python_version(),
              "ensemble": {"E": 3, "Qw": 3, "Qa": 2}, "entries": entries, "payload_bytes": PAYLOAD,
              "windows": windows, "default_window": DEFAULT_WINDOW,
              "goal_seconds": GOAL_S, "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        uri = f"sqlite:///{tmp}/metadata.db?lease_seconds=5"
        with BookieCluster(3, Path(tmp) / "bookies", uri):
            for _ in range(repeats):
                for window in windows:  # interleaved: W=1, default, W=1, default, ...
                    result["runs"].append(recover_once(uri, entries, window, profile))
    result["by_window"] = {}
    for window in windows:
        seconds = [r["recovery_seconds"] for r in result["runs"] if r["window"] == window]
        forward = [r["entries_read_forward"] for r in result["runs"] if r["window"] == window]
        result["by_window"][str(window)] = {
            "recovery_seconds": {"median": statistics.median(seconds), "min": min(seconds), "max": max(seconds)},
            "entries_read_forward": {"median": statistics.median(forward), "min": min(forward), "max": max(forward)}}
    headline = str(DEFAULT_WINDOW if DEFAULT_WINDOW in windows else windows[-1])
    result["recovery_seconds"] = result["by_window"][headline]["recovery_seconds"]
    result["goal_met"] = result["recovery_seconds"]["median"] <= GOAL_S
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 4 and sys.argv[1] == "--writer":
        return writer_main(sys.argv[2], int(sys.argv[3]))
    parser = BenchParser(__doc__, quick="20,000 entries, once")
    parser.number("--entries", int, 100_000, 20_000, help="entries the writer confirms")
    parser.number("--repeats", int, 3, 1, help="repetitions")
    parser.add_argument("--windows", default=f"1,{DEFAULT_WINDOW}",
                        help=f"recovery_read_window values, interleaved (default 1,{DEFAULT_WINDOW})")
    parser.add_argument("--profile", type=Path, default=None,
                        help="cProfile the recovering client; writes FILE.w<window>.prof per window (last repetition)")
    args = parser.parse_args(argv)
    try:
        windows = [int(w) for w in args.windows.split(",")]
        for window in windows:
            ClientConfig(recovery_read_window=window)
    except ValueError as exc:
        parser.error(f"--windows takes recovery_read_window values separated by commas: {exc}")
    return emit(run(args.entries, args.repeats, windows, args.profile), args.out)


if __name__ == "__main__":
    sys.exit(main())
