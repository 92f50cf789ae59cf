"""The raw limits of a disk, measured in the same run as a benchmark: fsync'd write loops."""
from __future__ import annotations

import os
import time
from pathlib import Path

MiB = 1024 * 1024


def fsynced_writes(paths: list[Path], block_bytes: int, seconds: float) -> dict:
    """Append ``block_bytes`` to every file in ``paths`` then fdatasync each, in a loop, for ``seconds``.

    One path gives the single-disk limit (fsyncs/s, MB/s); several paths give the
    cost of writing the same bytes to several files, as a replicated write does.
    """
    block = os.urandom(block_bytes)
    fds = [os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for path in paths]
    try:
        rounds, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            for fd in fds:
                os.write(fd, block)
            for fd in fds:
                os.fdatasync(fd)
            rounds += 1
        elapsed = time.perf_counter() - started
    finally:
        for fd in fds:
            os.close(fd)
        for path in paths:
            path.unlink(missing_ok=True)
    return {
        "files": len(paths),
        "block_bytes": block_bytes,
        "rounds_per_s": round(rounds / elapsed),
        "mb_per_s": round(rounds * block_bytes / elapsed / 1e6, 1),
    }


def raw_fsync_rate(directory: Path, seconds: float) -> dict:
    """4 KiB append + fdatasync on one file, as fast as possible."""
    result = fsynced_writes([directory / "raw-fsync.bin"], 4096, seconds)
    return {"fsyncs_per_s": result["rounds_per_s"], "block_bytes": 4096}


def raw_sequential_fsync_bandwidth(directory: Path, seconds: float) -> dict:
    """Sequential 1 MiB writes on one file, each fdatasync'd."""
    result = fsynced_writes([directory / "raw-seq.bin"], MiB, seconds)
    return {"mb_per_s": result["mb_per_s"], "write_bytes": MiB}
