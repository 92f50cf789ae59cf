"""What starting a journal write before the add's other work would save: a model of a bookie's paced add path.

Usage: ``python bench/journal_overlap.py [--dir DIR] [--seconds 8] [--work-us 40 70] [--rounds 3] [--out FILE]``.

A diagnosis tool, not one of ``python -m bench``'s benchmarks. A bookie stores a small add (the entry log's write,
the index, ~30-70 µs of CPU) and then writes its journal record and ``fdatasync``s it, all on the thread that
received it: the device sees the record only once the storing is done. Linux can start a file's writeback without
waiting (``sync_file_range(SYNC_FILE_RANGE_WRITE)``), so the record could go to the device first and the storing
run while it is written; the ``fdatasync`` after it then finds its data on the way. This measures both orders
without a bookie: 3 processes (as 3 bookies), each appending 1,150-byte records at 1,000/s to a file of its own
(zeros written and fsync'd first, as the journal keeps them ahead), and per record

* ``serial``: ``--work-us`` of CPU (a spin: the storing), then ``pwrite`` and ``fdatasync`` (the bookie today);
* ``overlap``: ``pwrite``, ``sync_file_range(WRITE)``, the same CPU, then ``fdatasync``;

the latency from the start of the work to the ``fdatasync``'s return, all 3 processes' records together. The orders
alternate in every round (serial first in even rounds), on fresh files in ``--dir``. The result: each run's p50,
p90, p99 (ms) and each order's median of them per work size.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.cli import BenchParser, log_warnings  # noqa: E402
from bench.output import emit  # noqa: E402

ORDERS = ("serial", "overlap")
RECORD_BYTES = 1_150  # a 1 KiB add's journal record and its share of the group's COMMIT record
ZEROS_BYTES = 16 * 1024 * 1024  # written ahead of the records, as the journal's filler keeps them
SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of the range's dirty pages, do not wait
RATE = 1_000.0
PROCESSES = 3


def start_writeback():
    """``sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)`` of libc (Python's ``os`` has none)."""
    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.sync_file_range
    call.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]

    def start(fd: int, offset: int, nbytes: int) -> None:
        if call(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"sync_file_range: {os.strerror(error)}")
    return start


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def appender(path: str, order: str, work_s: float, seconds: float, results) -> None:
    """One process: records at ``RATE``/s for ``seconds`` in ``order``; puts the latencies (seconds) on ``results``."""
    start = start_writeback()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        zeros = bytes(1 << 20)
        for _ in range(ZEROS_BYTES // len(zeros)):
            os.write(fd, zeros)
        os.fsync(fd)
        record, offset, latencies = os.urandom(RECORD_BYTES), 0, []
        began = time.perf_counter()
        while time.perf_counter() - began < seconds and offset + RECORD_BYTES <= ZEROS_BYTES:
            delay = began + len(latencies) / RATE - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            at = time.perf_counter()
            if order == "serial":
                spin(work_s)
                os.pwrite(fd, record, offset)
            else:
                os.pwrite(fd, record, offset)
                start(fd, offset, RECORD_BYTES)
                spin(work_s)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - at)
            offset += RECORD_BYTES
        results.put(latencies)
    finally:
        os.close(fd)


def quantiles(values: list[float]) -> dict:
    from fanout_limits import percentile  # here, not at the top: the appenders (spawned) stay free of its imports
    return {**{name: round(percentile(values, fraction), 3)
               for name, fraction in (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99))}, "records": len(values)}


def one_run(directory: Path, order: str, work_s: float, seconds: float) -> dict:
    """``PROCESSES`` appenders at once in ``order``; the quantiles of all their records' latencies."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    context = multiprocessing.get_context("spawn")  # no inherited locks or threads of the caller
    results = context.Queue()
    with tempfile.TemporaryDirectory(prefix="journal-overlap-", dir=directory) as tmp:
        processes = [context.Process(target=appender, args=(f"{tmp}/journal-{index}", order, work_s, seconds, results))
                     for index in range(PROCESSES)]
        for process in processes:
            process.start()
        try:
            latencies = [value for _ in processes for value in results.get(timeout=seconds + 120)]
        finally:
            for process in processes:
                process.join(timeout=30)
                if process.is_alive():
                    process.kill()
                    process.join()
        if any(process.exitcode != 0 for process in processes):
            raise RuntimeError(f"an appender failed: exit codes {[process.exitcode for process in processes]}")
    return quantiles(latencies)


def run(directory: Path, seconds: float, works_us: list[float], rounds: int) -> dict:
    runs = {f"{order} {work:g} us": [] for work in works_us for order in ORDERS}
    for round_number in range(rounds):
        for work in works_us:
            for order in ORDERS if round_number % 2 == 0 else ORDERS[::-1]:
                figures = one_run(directory, order, work / 1e6, seconds)
                runs[f"{order} {work:g} us"].append({**figures, "round": round_number,
                                                     "load_average_1m": round(os.getloadavg()[0], 2)})
    medians = {name: {key: statistics.median(run[key] for run in values) for key in ("p50_ms", "p90_ms", "p99_ms")}
               for name, values in runs.items()}
    return {"tool": "journal_overlap", "directory": str(directory), "seconds_per_run": seconds, "rate_per_s": RATE,
            "processes": PROCESSES, "record_bytes": RECORD_BYTES, "rounds": rounds, "runs": runs, "medians": medians}


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__)
    parser.number("--seconds", float, 8.0, help="length of each run")
    parser.number("--rounds", int, 3, help="rounds of every order and work size")
    parser.add_argument("--work-us", type=float, nargs="+", default=[40.0, 70.0],
                        help="CPU per record before its fdatasync, in µs (default 40 70)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the files go")
    log_warnings()
    args = parser.parse_args(argv)
    if any(not 0 <= work <= 900 for work in args.work_us):
        parser.error(f"--work-us must be between 0 and 900 (a record is due every 1,000 µs), got {args.work_us}")
    return emit(run(args.dir, args.seconds, args.work_us, args.rounds), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
