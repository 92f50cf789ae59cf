"""A Spark benchmark's stream read again by a plain ``LedgerReader``, without Spark, in a fresh process.

``client_read(sandbox, spans, repeats)`` runs this file as a child process
(``python bench/client_read.py URI --repeats N --bookie-pids JSON SPAN ...``),
which reads entries 0..last of each ``ledger:last`` span ``repeats`` times
(``read_spans``) and prints one JSON document: the run that cost the least CPU
(the client's and each bookie's, per MiB of entries), its seconds and MiB/s,
and every run's seconds. That is what any Spark read of the stream spends on
top of what Spark itself does with the batches (``bench/spark_io.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_usage import cpu_seconds  # noqa: E402

CHILD_TIMEOUT_S = 600


def client_read(sandbox, spans: list[str], repeats: int) -> dict:
    """The stream's entries fetched by a plain ``LedgerReader`` in a fresh Python process (see the module
    docstring); RuntimeError with the child's error output if it failed."""
    bookies = {f"bookie-{index}": bookie.pid for index, bookie in enumerate(sandbox.bookies)}
    command = [sys.executable, str(Path(__file__).resolve()), sandbox.metadata_uri,
               "--repeats", str(repeats), "--bookie-pids", json.dumps(bookies), *spans]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the client read failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def read_spans(uri: str, spans: list[str], repeats: int, bookie_pids: dict[str, int]) -> dict:
    """Read entries 0..last of each ``ledger:last`` span ``repeats`` times in this process."""
    from pyspark_ledger import LedgerClient

    pids = {"client": os.getpid(), **bookie_pids}
    runs = []
    with LedgerClient(uri) as client:
        for _ in range(repeats):
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            started, nbytes = time.perf_counter(), 0
            for span in spans:
                ledger_id, last = map(int, span.split(":"))
                for entry in client.open_ledger(ledger_id, b"", recovery=False).read(0, last, copy=False):
                    nbytes += len(entry.data)
            seconds = time.perf_counter() - started
            used = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
            runs.append((sum(used.values()), seconds, used))
    cpu, seconds, used = min(runs, key=lambda run: run[0])
    mib = nbytes / 2**20
    per_mib = {name: round(value / mib * 1e3, 2) for name, value in used.items()}
    return {"seconds": round(seconds, 3), "mib_per_s": round(mib / seconds, 1), "entry_bytes": nbytes,
            "cpu_seconds": round(cpu, 2), "cpu_ms_per_mib": per_mib, "runs": [round(run[1], 3) for run in runs]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("uri", help="the metadata service URI")
    parser.add_argument("--repeats", type=int, default=1, help="runs over every span (default 1)")
    parser.add_argument("--bookie-pids", default="{}", help="JSON {name: pid} of the bookies to take CPU of")
    parser.add_argument("spans", nargs="+", help="ledger:last_entry_id, one per ledger")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    print(json.dumps(read_spans(args.uri, args.spans, args.repeats, json.loads(args.bookie_pids))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
