"""Machine instructions per paced add in the client: a measure of its CPU that the machine's load cannot move.

Usage: ``python bench/client_instructions.py [--adds 40] [--rate 20] [--out FILE]``. Needs ``valgrind``.

A diagnosis tool beside ``instructions.py`` (which counts a bookie's add path), not one of ``python -m bench``'s
benchmarks. A paced add's latency on these 2 cores follows the CPU the four processes spend on it, and the client
spends the most (docs/measurements.md, "Adds written by the send that queued them, session 28"), but its CPU per
paced add moves by 10 % between identical runs. Valgrind's ``callgrind`` counts the instructions a process
executes, which do not depend on the load.

This starts 3 real bookies (framed add ports, as the replication benchmark runs them), outside valgrind, and runs
a client process under callgrind twice: it creates a ledger (E=Qw=3, Qa=2), writes 20 adds of 1 KiB paced at
``--rate``/s to warm up, then ``--adds`` more (the short run) or 3 × as many (the long run), and closes the ledger.
At 20/s under valgrind every add is answered by all 3 bookies before the next is due, as in the paced benchmark at
1,000/s on a real CPU, so each add pays the whole path: the call, the hand-off to the network thread, 3 writes, 3
answers, the confirmation and its future. Instructions per add = (long - short) ÷ (2 × ``--adds``): the start-up
and the warm-up cancel out. Work done per second rather than per add (timers) is in it in proportion to
1 ÷ rate: at 20/s about 2 % of the count (40/s gives 2.5 % fewer instructions per add).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.cli import BenchParser, log_warnings  # noqa: E402
from bench.instructions import collected  # noqa: E402
from bench.output import emit  # noqa: E402

LONG_FACTOR = 3
WARM_UP_ADDS = 20


def counted_run(uri: str, adds: int, rate: float) -> int:
    """Instructions of one client process that writes ``adds`` paced adds after the warm-up (see the docstring)."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
               str(Path(__file__).resolve()), "--child", uri, str(adds), str(rate)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same hashing every run: set and dict orders, and their cost
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the counted client failed ({done.returncode}): {done.stderr[-800:]}")
    return collected(done.stderr)


def child(uri: str, adds: int, rate: float) -> None:
    """The counted process: one writer, the warm-up, ``adds`` paced adds, the ledger closed."""
    from replication import PASSWORD, drive_writer

    from pyspark_ledger.client import ClientConfig, LedgerClient

    with LedgerClient(uri, ClientConfig(max_inflight_adds=1_000)) as client:
        writer = client.create_ledger(3, 3, 2, password=PASSWORD)
        drive_writer(writer, 1024, WARM_UP_ADDS / rate, 1_000, rate)
        drive_writer(writer, 1024, adds / rate, 1_000, rate)
        writer.close()


def per_add(adds: int, rate: float) -> dict:
    """Instructions per paced add of the client (see the module docstring)."""
    from replication import OURS

    from pyspark_ledger.testing.bookies import BookieCluster

    with tempfile.TemporaryDirectory(prefix="client-instructions-") as tmp:
        uri = f"sqlite:///{tmp}/metadata.db?lease_seconds=5"
        with BookieCluster(3, Path(tmp) / "bookies", uri, **OURS):
            time.sleep(1.0)
            short, long = counted_run(uri, adds, rate), counted_run(uri, adds * LONG_FACTOR, rate)
    per = (long - short) / (adds * (LONG_FACTOR - 1))
    return {"adds": [adds, adds * LONG_FACTOR], "rate_per_s": rate, "instructions": [short, long],
            "per_add": round(per)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], int(argv[2]), float(argv[3]))
        return 0
    parser = BenchParser(__doc__)
    parser.number("--adds", int, 40, help="paced adds in the short run (the long one has 3 times as many)")
    parser.number("--rate", float, 20.0, help="adds per second (under valgrind, 20 leaves each add alone)")
    log_warnings()
    args = parser.parse_args(argv)
    if args.adds > 2_000:
        parser.error("--adds must be at most 2000")
    if args.rate > 100:
        parser.error("--rate must be at most 100 (under valgrind a faster pace no longer leaves each add alone)")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    return emit({"tool": "client_instructions", "load_average_1m": round(os.getloadavg()[0], 2),
                 **per_add(args.adds, args.rate)}, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
