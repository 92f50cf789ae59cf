"""The paced fsync floor: how soon a record paced at 1,000/s can be durable on 2 of 3 journals of this disk.

``paced_group_commits(directory)`` starts one writer thread per file (3 by default), each doing what a bookie's
journal does with nothing else around it: take every record queued so far, append them with one ``write``
(``O_APPEND``), ``fdatasync``, repeat (a group commit). A pacer queues each record on every writer at
``rate`` records/s, as the replication client sends an entry to the 3 bookies of its ensemble. A record's
latency is the time from its queueing to its ``quorum``-th durable copy (2 of 3: an ack quorum of 2), as the
gRPC fan-out's is to its second ack. No gRPC, no Python of the bookie: what is left is the disk's fsync under 3
concurrent journals, and the wait for the group commit in progress. Latency of an add that is fsync'd before
it is acknowledged cannot be below this on the same disk at the same pace.

    python -m bench.paced_fsync [--dir DIR] [--seconds 6]
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from pathlib import Path

RECORD_BYTES = 1_100  # a 1 KiB entry with its entry header and its journal record's header


def _percentile_ms(values: list[float], fraction: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000.0, 3) if ordered else None


class _Writer:
    """One journal: appends what is queued with one write, fdatasyncs, tells ``durable`` which records."""

    def __init__(self, path: Path, record: bytes, durable, preallocate: int = 0) -> None:
        self.path, self._record, self._durable = path, record, durable
        self._queue: deque[int] = deque()
        self._cond = threading.Condition()
        self._stop = False
        self.fsync_seconds: list[float] = []
        self.records_per_commit: list[int] = []
        self._offset = 0
        if preallocate:  # zeros written and fsync'd first: the records then overwrite them (no size change)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            zeros = bytes(1 << 20)
            for _ in range(-(-preallocate // len(zeros))):
                os.write(self._fd, zeros)
            os.fsync(self._fd)
        else:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self._preallocated = bool(preallocate)
        self.thread = threading.Thread(target=self._run, name=f"paced-fsync {path.name}", daemon=True)
        self.thread.start()

    def queue(self, index: int) -> None:
        with self._cond:
            self._queue.append(index)
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self.thread.join()
        os.close(self._fd)
        self.path.unlink(missing_ok=True)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if not self._queue:
                    return
                taken = list(self._queue)
                self._queue.clear()
            data = self._record * len(taken)
            if self._preallocated:
                self._offset += os.pwrite(self._fd, data, self._offset)
            else:
                os.write(self._fd, data)
            started = time.perf_counter()
            os.fdatasync(self._fd)
            done = time.perf_counter()
            self.fsync_seconds.append(done - started)
            self.records_per_commit.append(len(taken))
            self._durable(taken, done)


def paced_group_commits(directory: Path, files: int = 3, quorum: int = 2, rate: float = 1000.0,
                        seconds: float = 6.0, record_bytes: int = RECORD_BYTES, preallocated: bool = False) -> dict:
    """Records paced at ``rate``/s to ``files`` group-committing writers in ``directory``; latency to the
    ``quorum``-th durable copy (see the module docstring). ``preallocated``: the files are first filled with
    zeros (written and fsync'd) and the records overwrite them, so no fdatasync has to change a file's size
    or allocate blocks (as a journal that preallocates its files would)."""
    if not 1 <= quorum <= files:
        raise ValueError(f"quorum must be between 1 and files ({files}), got {quorum}")
    queued_at: dict[int, float] = {}
    copies: dict[int, int] = {}
    latencies: list[float] = []
    lock = threading.Lock()

    def durable(indexes: list[int], now: float) -> None:
        with lock:
            for index in indexes:
                count = copies.get(index, 0) + 1
                copies[index] = count
                if count == quorum:
                    latencies.append(now - queued_at[index])
                if count == files:
                    del copies[index], queued_at[index]
    record = os.urandom(record_bytes)
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    room = int(rate * seconds * record_bytes * 1.25) + (1 << 20) if preallocated else 0
    writers = [_Writer(directory / f"paced-fsync-{stamp}-{n}", record, durable, room) for n in range(files)]
    count, started = 0, time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            delay = started + count / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            with lock:
                queued_at[count] = time.perf_counter()
            for writer in writers:
                writer.queue(count)
            count += 1
    finally:
        for writer in writers:
            writer.stop()
    fsyncs = [value for writer in writers for value in writer.fsync_seconds]
    commits = [value for writer in writers for value in writer.records_per_commit]
    return {"method": f"{files} files, one writer thread each: queued records appended with one write, then "
                      f"fdatasync; {rate:,.0f} records/s of {record_bytes} bytes to every file; latency from "
                      f"queueing to the record's durable copy {quorum} of {files}",
            "preallocated": preallocated, "records": count, f"p50_ms_to_copy_{quorum}": _percentile_ms(latencies, 0.5),
            f"p99_ms_to_copy_{quorum}": _percentile_ms(latencies, 0.99),
            "fsync_p50_ms": _percentile_ms(fsyncs, 0.5), "fsync_p99_ms": _percentile_ms(fsyncs, 0.99),
            "fsyncs_per_s_per_file": round(len(fsyncs) / files / seconds, 1),
            "records_per_fsync": round(sum(commits) / len(commits), 2) if commits else None,
            "load_average_1m": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import tempfile
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: a temporary directory)")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--preallocated", action="store_true", help="overwrite zeros written first")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="paced-fsync-", dir=args.dir) as tmp:
        print(json.dumps(paced_group_commits(Path(tmp), files=args.files, quorum=min(2, args.files),
                                             seconds=args.seconds, preallocated=args.preallocated), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
