"""A child process for the crash tests: adds entries to a BookieStorage and reports acks on stdout.

Lines written (each one only after its add or fence resolved OK):
``ack <ledger> <entry>``, ``fenced <ledger>``, and ``ready`` when the
``write`` mode is about to finish. Modes:

* ``write``: add ``--entries`` entries to each of ``--ledgers``, one batch
  of ``--batch`` at a time (each waited for; ``--interleave`` takes the
  ledgers in turn batch by batch, so entry logs mix them), fence ``--fence``
  ledgers, ``--unjournaled L``: hold the journal (its thread stops committing, as if the process were frozen)
  and add entries to ledger L, which then never become durable, garbage collect (``--delete`` ledgers, then ``--rotate
  THRESHOLD``: seal the current log early, then ``--reclaim`` entry logs,
  then ``--compact THRESHOLD``), then ``--finish``: ``crash`` (exit
  without closing, as a crash would), ``close``, or ``checkpoint`` (then
  exit without closing). With BOOKIE_CRASH_POINT set, reaching that point
  ends the process (status 137).
* ``stream``: ``--threads`` threads add to their own ledger, several batches
  in flight each, with background checkpoints, until the process is killed;
  with ``--gc-churn`` one more thread writes short ledgers (ids from 1000),
  deletes them and reclaims/compacts entry logs, over and over.
"""
from __future__ import annotations

import argparse
import os
import threading
import time
import traceback
from pathlib import Path

from bookie_server.storage import BookieStorage, StorageConfig
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import KEY, add_op, journal_settings_from_env

_out_lock = threading.Lock()


def report(lines: list[str]) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    with _out_lock:
        os.write(1, data)


def write_mode(storage: BookieStorage, args: argparse.Namespace) -> None:
    end = args.first_entry + args.entries
    batches = [(ledger_id, range(first, min(first + args.batch, end)))
               for ledger_id in args.ledgers for first in range(args.first_entry, end, args.batch)]
    if args.interleave:
        batches.sort(key=lambda batch: (batch[1].start, args.ledgers.index(batch[0])))
    for ledger_id, ids in batches:
        statuses = storage.add_entries([add_op(ledger_id, entry_id) for entry_id in ids]).result(60)
        report([f"ack {ledger_id} {entry_id}" for entry_id, status in zip(ids, statuses) if status == pb.OK])
    for ledger_id in args.fence:
        if storage.fence(ledger_id, KEY).result(60) == pb.OK:
            report([f"fenced {ledger_id}"])
    if args.unjournaled is not None:
        hold_journal(storage)
        submitted = storage._journal.submitted
        adds = [add_op(args.unjournaled, entry_id) for entry_id in range(args.entries)]
        # the adding thread may lead the journal's commit (docs/protocol.md B1): then it is the frozen one
        threading.Thread(target=storage.add_entries, args=(adds,), daemon=True).start()
        while storage._journal.submitted == submitted:  # placed and submitted: the journal has it now
            time.sleep(0.001)
    collect_garbage(storage, args)
    report(["ready"])
    if args.finish == "close":
        storage.close()
    elif args.finish == "checkpoint":
        storage.checkpoint()
    os._exit(0)  # "crash": leave without closing, like a killed bookie


def hold_journal(storage: BookieStorage) -> None:
    """Script the interleaving of a frozen journal: from now on its group commits (by its thread, or by an adding
    thread that leads) never write or fsync (the adds stay pending), while the rest of the storage -- index,
    ledger state, checkpoints -- goes on."""
    held = threading.Event()
    storage._journal._commit = lambda batch: held.wait()


def collect_garbage(storage: BookieStorage, args: argparse.Namespace) -> None:
    if args.delete:
        report([f"deleted {ledger_id}" for ledger_id in storage.delete_ledgers(args.delete)])
    if args.rotate is not None:
        sealed = storage.rotate_entry_log(args.rotate, args.rotate_min_bytes)
        report([] if sealed is None else [f"sealed log {sealed}"])
    if args.reclaim:
        report([f"removed log {log_id}" for log_id in storage.reclaim_entry_logs().logs_deleted])
    if args.compact:
        report([f"compacted log {log_id}" for log_id in storage.compact_entry_logs(args.compact).logs_compacted])


def gc_churn(storage: BookieStorage) -> None:
    """Short ledgers written, deleted and collected again and again (ids from 1000 up); reports
    ``churned <ledger> <entry logs removed>`` after each round. A failure ends the process (the test sees it
    exit early)."""
    try:
        for ledger_id in range(1000, 10**6):
            for first in range(0, 40, 10):
                ops = [add_op(ledger_id, entry_id) for entry_id in range(first, first + 10)]
                assert storage.add_entries(ops).result(60) == [pb.OK] * 10
            assert storage.delete_ledgers([ledger_id]) == [ledger_id]
            removed = storage.reclaim_entry_logs().logs_deleted + storage.compact_entry_logs(0.9).logs_deleted
            report([f"churned {ledger_id} {len(removed)}"])
    except BaseException:
        traceback.print_exc()
        os._exit(3)


def stream_mode(storage: BookieStorage, args: argparse.Namespace) -> None:
    def adder(ledger_id: int) -> None:
        in_flight = []
        next_entry = 0
        while True:
            ids = range(next_entry, next_entry + args.batch)
            next_entry += args.batch
            in_flight.append((ids, storage.add_entries([add_op(ledger_id, entry_id) for entry_id in ids])))
            if len(in_flight) >= 4:
                done_ids, future = in_flight.pop(0)
                statuses = future.result(60)
                report([f"ack {ledger_id} {entry_id}" for entry_id, status in zip(done_ids, statuses)
                        if status == pb.OK])

    threads = [threading.Thread(target=adder, args=(index + 1,), daemon=True) for index in range(args.threads)]
    if args.gc_churn:
        threads.append(threading.Thread(target=gc_churn, args=(storage,), daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["write", "stream"])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--ledgers", type=int, nargs="*", default=[1])
    parser.add_argument("--entries", type=int, default=10)
    parser.add_argument("--first-entry", type=int, default=0)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--fence", type=int, nargs="*", default=[])
    parser.add_argument("--interleave", action="store_true")
    parser.add_argument("--unjournaled", type=int, default=None)
    parser.add_argument("--delete", type=int, nargs="*", default=[])
    parser.add_argument("--rotate", type=float, default=None)
    parser.add_argument("--rotate-min-bytes", type=int, default=1)
    parser.add_argument("--reclaim", action="store_true")
    parser.add_argument("--compact", type=float, default=0.0)
    parser.add_argument("--gc-churn", action="store_true")
    parser.add_argument("--finish", choices=["crash", "close", "checkpoint"], default="crash")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--journal-file-size", type=int, default=512 * 1024 * 1024)
    parser.add_argument("--entry-log-size", type=int, default=1024 * 1024 * 1024)
    parser.add_argument("--checkpoint-interval", type=float, default=0.0)
    args = parser.parse_args()
    storage = BookieStorage(StorageConfig(
        args.data_dir, journal_file_size=args.journal_file_size, entry_log_size=args.entry_log_size,
        checkpoint_interval_s=args.checkpoint_interval, **journal_settings_from_env()))
    (write_mode if args.mode == "write" else stream_mode)(storage, args)


if __name__ == "__main__":
    main()
