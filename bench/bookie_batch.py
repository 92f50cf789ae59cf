"""A bookie's own CPU per AddBatch, without gRPC: what each paced add costs it besides the transport.

Usage: ``python bench/bookie_batch.py [--dir DIR] [--adds 1] [--batches 5000] [--repeats 3] [--out FILE]``.

A diagnosis tool, not one of ``python -m bench``'s benchmarks. At a paced 1,000 adds/s an AddBatch carries one
or two adds, so a bookie's cost per add is mostly its cost per batch (docs/measurements.md, "Which side makes
the paced tail"). This drives one add stream's path in this process, batch by batch, waiting for each to be
durable before the next as a paced writer's bookie does: ``add_wire.decode_add_batch`` of the bytes a client
sends, ``AddStreamSession._take_batch`` (the reader thread's checks and ``BookieStorage.add_entries_then``: entry log,
index, journal submission), the group commit on the storage's own journal thread, and ``_answers`` (the handler
thread's answer in runs, docs/protocol.md W9). A fresh ``BookieStorage`` in ``--dir`` (``/dev/shm`` by default:
tmpfs, so ``fdatasync`` costs nothing and the figures are CPU). For each of ``--repeats`` runs: the CPU
(``time.thread_time``) per batch of each part, the journal thread's per group commit, and the whole process's
per batch; then the median and range of each. Every add must be answered OK.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli import BenchParser, log_warnings  # noqa: E402
from bench.output import emit  # noqa: E402
from bookie_server import journal  # noqa: E402
from bookie_server.add_stream import AddStreamSession  # noqa: E402
from bookie_server.add_wire import decode_add_batch  # noqa: E402
from bookie_server.limits import StreamLimits  # noqa: E402
from bookie_server.metrics import BookieMetrics  # noqa: E402
from bookie_server.storage import BookieStorage, StorageConfig  # noqa: E402
from pyspark_ledger.client.add_wire import AddEncoder  # noqa: E402
from pyspark_ledger.entry import EntryCodec, master_key  # noqa: E402

LEDGER = 7
PARTS = ("decode", "checks_and_storage", "answers", "journal_commit", "process")


class CommitClock:
    """Wraps ``Journal._commit`` to add up the journal thread's CPU per group commit."""

    def __init__(self) -> None:
        self.seconds, self.commits = 0.0, 0
        self._original = journal.Journal._commit

    def __enter__(self) -> "CommitClock":
        original = self._original

        def timed(journal_self, batch) -> None:
            started = time.thread_time()
            original(journal_self, batch)
            self.seconds += time.thread_time() - started
            self.commits += 1
        journal.Journal._commit = timed
        return self

    def __exit__(self, *exc) -> None:
        journal.Journal._commit = self._original


def batches(adds: int, count: int) -> list[bytes]:
    """``count`` AddBatches of ``adds`` 1 KiB entries each, encoded as a client sends them."""
    codec, encoder, data = EntryCodec(), AddEncoder(LEDGER, master_key(b"bench")), os.urandom(1024)
    return [b"".join(encoder.encode(entry, codec.encode(LEDGER, entry, entry - 1, entry * 1024, data))
                     for entry in range(first, first + adds)) for first in range(0, adds * count, adds)]


def one_run(directory: Path, adds: int, count: int, raws: list[bytes] | None = None) -> dict:
    """µs of CPU per batch of each part (and per group commit), over ``count`` batches of ``adds`` adds (``raws``:
    those batches already encoded, else they are encoded here)."""
    raws = batches(adds, count) if raws is None else raws
    with tempfile.TemporaryDirectory(prefix="bookie-batch-", dir=directory) as tmp, CommitClock() as clock:
        metrics = BookieMetrics()  # as a bookie counts them: the journal's group commits too
        storage = BookieStorage(StorageConfig(Path(tmp) / "bookie", checkpoint_interval_s=0),
                                on_journal_sync=metrics.journal_synced)
        try:
            session = AddStreamSession(storage, metrics, bookie_id="bench",
                                       limits=StreamLimits(max_entry_size=5 << 20), answer_runs=True)
            spent = dict.fromkeys(PARTS[:3], 0.0)
            answered = 0
            clock_now, process_started = time.thread_time, time.process_time()
            for raw in raws:
                started = clock_now()
                batch = decode_add_batch(raw)
                decoded = clock_now()
                session._take_batch(batch)
                stored = clock_now()
                item = session._results.get(timeout=30)  # durable: the journal thread put the statuses
                waited = clock_now()
                messages = session._answers([item])
                spent["answers"] += clock_now() - waited  # the bookie's part only: the counting below is ours
                spent["decode"] += decoded - started
                spent["checks_and_storage"] += stored - decoded
                for message in messages:  # OK answers come as runs (W9); a refusal as a result
                    answered += sum(run.last_entry_id - run.first_entry_id + 1 for run in message.acked)
            process = time.process_time() - process_started
        finally:
            storage.close()
    if answered != adds * count:
        raise RuntimeError(f"{adds * count - answered} of {adds * count} adds were not answered OK")
    per_batch = {part: round(seconds / count * 1e6, 1) for part, seconds in spent.items()}
    per_batch["journal_commit"] = round(clock.seconds / max(clock.commits, 1) * 1e6, 1)
    per_batch["process"] = round(process / count * 1e6, 1)
    return {"us_per_batch": per_batch, "group_commits": clock.commits, "load_average_1m": round(os.getloadavg()[0], 2)}


def run(directory: Path, adds: int, count: int, repeats: int) -> dict:
    runs = [one_run(directory, adds, count) for _ in range(repeats)]
    summary = {}
    for part in PARTS:
        values = [one["us_per_batch"][part] for one in runs]
        summary[part] = {"median": round(statistics.median(values), 1), "min": min(values), "max": max(values)}
    return {"tool": "bookie_batch", "directory": str(directory), "adds_per_batch": adds, "batches": count,
            "runs": runs, "us_per_batch": summary}


def main(argv: list[str] | None = None) -> int:
    parser = BenchParser(__doc__)
    parser.number("--adds", int, 1, help="1 KiB adds per AddBatch")
    parser.number("--batches", int, 5000, help="batches per run")
    parser.number("--repeats", int, 3, help="runs")
    parser.add_argument("--dir", type=Path, default=Path("/dev/shm"), help="where the storage goes (default tmpfs)")
    log_warnings()
    args = parser.parse_args(argv)
    return emit(run(args.dir, args.adds, args.batches, args.repeats), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
