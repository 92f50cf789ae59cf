"""A writer in its own process, for faults that stop a whole writer (SIGSTOP) while others recover its ledger.

``python -m pyspark_ledger.testing.jepsen.writer_process --metadata URI --history FILE --name NAME``
creates one ledger and appends to it (a few adds in flight) until an add fails, then tries
``--after-failure`` more adds (a fenced writer must see each one fail), closes the client and exits 0. Every
operation goes to the history file at once (JSON lines, flushed), so nothing is lost if it is killed.
It prints ``ledger N`` once the ledger exists and ``stopped: ERROR`` at the end. Bounded by
``--max-entries`` and ``--max-seconds``. It opens the metadata store as any client does: the fault
clusters' bookies register the addresses clients dial (``faults.cluster_base``).
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from concurrent.futures import wait

from pyspark_ledger.client import ClientConfig, LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.testing.jepsen.history import History
from pyspark_ledger.testing.jepsen.workers import PASSWORD, payload


def parse(argv):
    parser = argparse.ArgumentParser(prog="writer_process")
    parser.add_argument("--metadata", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--name", default="pw")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quorums", default="3,3,2")
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--after-failure", type=int, default=5)
    parser.add_argument("--max-entries", type=int, default=100_000)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--add-timeout", type=float, default=2.0)
    args = parser.parse_args(argv)
    if not 1 <= args.inflight <= 1000 or not 0 <= args.after_failure <= 1000 or not 1 <= args.max_entries <= 10**7:
        parser.error("--inflight must be 1..1000, --after-failure 0..1000, --max-entries 1..10^7")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    store = open_metadata_store(args.metadata)
    rng = random.Random(args.seed)
    quorums = tuple(int(part) for part in args.quorums.split(","))
    config = ClientConfig(add_timeout_s=args.add_timeout, read_timeout_s=args.add_timeout)
    deadline = time.monotonic() + args.max_seconds
    with open(args.history, "a") as sink, LedgerClient(store, config) as client:
        history = History(prefix=f"{args.name}-", sink=sink)
        op = history.invoke(args.name, "create")
        writer = client.create_ledger(*quorums, password=PASSWORD)
        history.ok(op, ledger_id=writer.ledger_id)
        print(f"ledger {writer.ledger_id}", flush=True)
        pending, failure, sequence, after = [], None, 0, 0
        while sequence < args.max_entries and time.monotonic() < deadline and after <= args.after_failure:
            data = payload(rng, args.name, writer.ledger_id, sequence, 120)
            sequence += 1
            op = history.invoke(args.name, "add", writer.ledger_id, data)
            try:
                future = writer.append_async(data)
            except LedgerError as exc:
                history.fail(op, exc)
                failure = failure or exc
                after += 1
                continue
            pending.append((op, future))
            if len(pending) >= args.inflight or failure is not None:
                failure = _settle(history, pending, wait_all=failure is not None) or failure
                if failure is not None:
                    after += 1
            time.sleep(0.01)
        failure = _settle(history, pending, wait_all=True) or failure
        print(f"stopped: {type(failure).__name__ if failure else 'limit'}: {failure}", flush=True)
        writer.abort("the writer process is done")
    store.close()
    return 0


def _settle(history: History, pending: list, wait_all: bool):
    """Record the completions of the oldest pending adds (all of them with ``wait_all``); returns a failure."""
    failure = None
    targets = list(pending) if wait_all else pending[:1]
    wait([future for _, future in targets], timeout=30)
    for op, future in targets:
        if not future.done():
            continue
        pending.remove((op, future))
        error = future.exception()
        if error is None:
            history.ok(op, entry_id=future.result())
        else:
            history.unknown(op, error)
            failure = failure or error
    return failure


if __name__ == "__main__":
    sys.exit(main())
