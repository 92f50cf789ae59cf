"""A child process for the crash tests: adds entries to a BookieStorage and reports acks on stdout.

Lines written (each one only after its add or fence resolved OK):
``ack <ledger> <entry>``, ``fenced <ledger>``, and ``ready`` when the
``write`` mode is about to finish. Modes:

* ``write``: add ``--entries`` entries to each of ``--ledgers``, one batch
  of ``--batch`` at a time (each waited for), fence ``--fence`` ledgers, then
  ``--finish``: ``crash`` (exit without closing, as a crash would),
  ``close``, or ``checkpoint`` (then exit without closing: with
  BOOKIE_CRASH_POINT set, the checkpoint itself ends the process).
* ``stream``: ``--threads`` threads add to their own ledger, several batches
  in flight each, with background checkpoints, until the process is killed.
"""
from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

from bookie_server.storage import BookieStorage, StorageConfig
from pyspark_ledger.wire.v1 import bookie_pb2 as pb
from tests.bookie_storage.entries import KEY, add_op, journal_write_data_from_env

_out_lock = threading.Lock()


def report(lines: list[str]) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    with _out_lock:
        os.write(1, data)


def write_mode(storage: BookieStorage, args: argparse.Namespace) -> None:
    for ledger_id in args.ledgers:
        for first in range(args.first_entry, args.first_entry + args.entries, args.batch):
            ids = range(first, min(first + args.batch, args.first_entry + args.entries))
            statuses = storage.add_entries([add_op(ledger_id, entry_id) for entry_id in ids]).result(60)
            report([f"ack {ledger_id} {entry_id}" for entry_id, status in zip(ids, statuses) if status == pb.OK])
    for ledger_id in args.fence:
        if storage.fence(ledger_id, KEY).result(60) == pb.OK:
            report([f"fenced {ledger_id}"])
    report(["ready"])
    if args.finish == "close":
        storage.close()
    elif args.finish == "checkpoint":
        storage.checkpoint()
    os._exit(0)  # "crash": leave without closing, like a killed bookie


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
    parser.add_argument("--finish", choices=["crash", "close", "checkpoint"], default="crash")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--journal-file-size", type=int, default=512 * 1024 * 1024)
    parser.add_argument("--entry-log-size", type=int, default=1024 * 1024 * 1024)
    parser.add_argument("--checkpoint-interval", type=float, default=0.0)
    args = parser.parse_args()
    storage = BookieStorage(StorageConfig(
        args.data_dir, journal_file_size=args.journal_file_size, entry_log_size=args.entry_log_size,
        checkpoint_interval_s=args.checkpoint_interval, journal_write_data=journal_write_data_from_env()))
    (write_mode if args.mode == "write" else stream_mode)(storage, args)


if __name__ == "__main__":
    main()
