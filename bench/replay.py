"""Benchmark journal replay on a bookie restart beside a plain sequential read of the same journal files.

Usage: ``python bench/replay.py [--mb 256] [--repeats 3] [--quick] [--cold-entry-logs] [--out FILE]``.

Starts one real bookie process with background checkpoints off (``--checkpoint-interval 0``), so its
journal keeps everything written since it started, and writes ``--mb`` MB through ``LedgerClient``
(E=Qw=Qa=1) in 16 KiB entries (bodies up to 64 KiB travel in the journal). The bookie is then killed
with SIGKILL (no final checkpoint). Each repetition then:

1. drops the journal files from the page cache (``posix_fadvise(DONTNEED)``) and reads them
   sequentially in 1 MiB reads: the plain read, MB/s (the replay starts from the same state: the ratio
   uses this one); then reads them with ``O_DIRECT`` (past the guest's page cache: what the disk, or the
   host's cache behind it, gives) and once more plainly right after (warm: from the page cache), so
   that the table says where the plain read's bytes came from;
2. drops them again and restarts the bookie: the replay time is what the bookie logs ("replayed N
   journal records from F files in S s"), and start-to-ready is the time from spawning the process to its
   ready line (Python start-up and imports included); it is killed again afterwards, so the next
   repetition replays the same journal.

Replay finds the journal's bodies already in the entry logs (``bookie_server/replay_in_place``; the count is
logged and reported as ``bodies_found_in_place``) and reads them there to check them: from the page cache after
a process crash, as here. ``--cold-entry-logs`` drops the entry logs from the page cache too before each restart
(as after a reboot, where they come from the disk).

Replay MB/s is the journal's bytes over the logged replay time. Goal of issue 16: replay >= 0.5 x the
plain read. ``--quick``: 32 MB, once.
"""
from __future__ import annotations

import mmap
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.cli import BenchParser  # noqa: E402
from bench.output import emit  # noqa: E402

from pyspark_ledger.client import ClientConfig, LedgerClient  # noqa: E402
from pyspark_ledger.testing.bookies import STDERR_LOG, BookieProcess  # noqa: E402

PASSWORD = b"bench"
ENTRY = 16 * 1024
MiB = 1024 * 1024
GOAL_RATIO = 0.5
REPLAYED = re.compile(r"replayed (\d+) journal records from (\d+) files in ([0-9.]+) s")
IN_PLACE = re.compile(r"\((\d+) bodies found in the entry logs\)")


def write_through(bookie: BookieProcess, megabytes: int) -> int:
    entries = megabytes * 1_000_000 // ENTRY
    with LedgerClient(bookie.metadata_uri, ClientConfig(max_inflight_adds=256)) as client:
        writer = client.create_ledger(1, 1, 1, password=PASSWORD)
        data = os.urandom(ENTRY)
        window = [writer.append_async(data) for _ in range(entries)]
        for future in window:
            future.result()
    return entries


def journal_files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.iterdir() if path.is_file())


def drop_from_cache(paths: list[Path]) -> None:
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def plain_read(paths: list[Path], drop: bool = True) -> dict:
    if drop:
        drop_from_cache(paths)
    total, started = 0, time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while chunk := handle.read(MiB):
                total += len(chunk)
    seconds = time.perf_counter() - started
    return {"bytes": total, "seconds": round(seconds, 3), "mb_per_s": round(total / seconds / 1e6, 1)}


def direct_read(paths: list[Path]) -> dict:
    """The files read with O_DIRECT into a page-aligned 1 MiB buffer; {"error": ...} where the file system
    refuses O_DIRECT (tmpfs)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return {"error": "O_DIRECT is not available on this platform"}
    buffer = mmap.mmap(-1, MiB)
    total, started = 0, time.perf_counter()
    try:
        for path in paths:
            descriptor = os.open(path, os.O_RDONLY | flag)
            try:
                while (count := os.readv(descriptor, [buffer])) > 0:
                    total += count
            finally:
                os.close(descriptor)
    except OSError as exc:
        return {"error": f"O_DIRECT read failed: {exc}"}
    finally:
        buffer.close()
    seconds = time.perf_counter() - started
    return {"bytes": total, "seconds": round(seconds, 3), "mb_per_s": round(total / seconds / 1e6, 1)}


def replayed_since(log: Path, offset: int) -> tuple[int, int, float, int | None]:
    with open(log, "rb") as handle:
        handle.seek(offset)
        text = handle.read().decode(errors="replace")
    lines = [line for line in text.splitlines() if REPLAYED.search(line)]
    if not lines:
        raise RuntimeError(f"the bookie logged no replay line in {log} (is --log-level above INFO?)")
    records, files, seconds = REPLAYED.search(lines[-1]).groups()
    in_place = IN_PLACE.search(lines[-1])
    return int(records), int(files), float(seconds), int(in_place.group(1)) if in_place else None


def restart_and_replay(bookie: BookieProcess, paths: list[Path], cold_entry_logs: bool) -> dict:
    journal_bytes = sum(path.stat().st_size for path in paths)
    drop_from_cache(paths)
    if cold_entry_logs:
        drop_from_cache(sorted((bookie.data_dir / "entry_logs").glob("*.log")))
    log = bookie.data_dir / STDERR_LOG
    offset = log.stat().st_size if log.exists() else 0
    started = time.perf_counter()
    bookie.start()
    ready = time.perf_counter() - started
    bookie.kill()  # the next repetition replays the same journal (no checkpoint)
    records, files, seconds, in_place = replayed_since(log, offset)
    return {"journal_bytes": journal_bytes, "records": records, "files": files, "replay_seconds": seconds,
            "replay_mb_per_s": round(journal_bytes / seconds / 1e6, 1) if seconds else None,
            "bodies_found_in_place": in_place, "start_to_ready_seconds": round(ready, 3),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def run(megabytes: int, repeats: int, cold_entry_logs: bool = False) -> dict:
    result = {"benchmark": "replay", "cpus": os.cpu_count(), "python": platform.python_version(),
              "written_mb": megabytes, "entry_bytes": ENTRY, "goal_ratio": GOAL_RATIO,
              "cold_entry_logs": cold_entry_logs,
              "load_average_at_start": [round(x, 2) for x in os.getloadavg()], "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        uri = f"sqlite:///{tmp}/metadata.db?lease_seconds=5"
        with BookieProcess(Path(tmp) / "bookie", uri, checkpoint_interval=0) as bookie:
            result["entries"] = write_through(bookie, megabytes)
            bookie.kill()
            for _ in range(repeats):
                paths = journal_files(bookie.data_dir / "journal")  # each start adds a journal file
                plain = plain_read(paths)
                direct = direct_read(paths)
                warm = plain_read(paths, drop=False)
                replay = restart_and_replay(bookie, paths, cold_entry_logs)
                replay["plain_read_mb_per_s"] = plain["mb_per_s"]
                replay["direct_read_mb_per_s"] = direct.get("mb_per_s")
                if "error" in direct:
                    replay["direct_read_error"] = direct["error"]
                replay["warm_read_mb_per_s"] = warm["mb_per_s"]
                replay["ratio_to_plain_read"] = round(replay["replay_mb_per_s"] / plain["mb_per_s"], 2)
                if direct.get("mb_per_s"):
                    replay["ratio_to_direct_read"] = round(replay["replay_mb_per_s"] / direct["mb_per_s"], 2)
                result["runs"].append(replay)
    ratios = [run["ratio_to_plain_read"] for run in result["runs"]]
    result["ratio_to_plain_read_median"] = statistics.median(ratios)
    result["goal_met"] = statistics.median(ratios) >= GOAL_RATIO
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__, quick="32 MB, once")
    parser.number("--mb", int, 256, 32, help="MB written through the bookie")
    parser.number("--repeats", int, 3, 1, help="restarts measured")
    parser.add_argument("--cold-entry-logs", action="store_true",
                        help="drop the entry logs from the page cache too before each restart")
    args = parser.parse_args(argv)
    return emit(run(args.mb, args.repeats, args.cold_entry_logs), args.out)


if __name__ == "__main__":
    sys.exit(main())
