"""Machine instructions per add on a bookie's add path: a measure of its CPU that the machine's load cannot move.

Usage: ``python bench/instructions.py [--adds 1 100] [--batches 50] [--out FILE]``. Needs ``valgrind``.

A diagnosis tool, not one of ``python -m bench``'s benchmarks. Timings on these shared 2-core machines swing by
15 % between identical runs of ``bookie_batch.py`` (docs/measurements.md, "Instructions per add in a bookie"), so
a change that saves 3 % of the bookie's CPU cannot be seen in them. Valgrind's ``callgrind`` counts the
instructions a process executes, which do not depend on the load, the clock or the caches: the same run gives
the same count to the last few instructions per batch, once the child's string hashing is fixed
(``PYTHONHASHSEED=0``: with random seeds, counts of one tree over 20 and 60 batches of one add drifted by 10 %).

For each ``--adds`` (adds per AddBatch), this runs ``bookie_batch.one_run`` -- decode, the reader's checks and
storage, the group commit on the journal thread, the answers; a fresh ``BookieStorage`` on tmpfs -- in a child
process under callgrind twice: over ``--batches`` batches and over 3 × as many. The batches are encoded once
beforehand and handed to the child ready made, so the client's encoding is not counted; the child's start-up
(interpreter, imports, the storage's opening) is the same in both runs and cancels out of the difference. So
instructions per batch = (count of the long run - count of the short run) ÷ (2 × ``--batches``), and per add
that ÷ adds. ``bookie_batch``'s own timing calls are in it (a few per batch, the same in every version).
"""
from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli import BenchParser, log_warnings  # noqa: E402
from bench.output import emit  # noqa: E402

LONG_FACTOR = 3
_COLLECTED = re.compile(r"Collected : (\d+)")


def collected(stderr: str) -> int:
    """The instruction count callgrind prints at the end of a run."""
    match = _COLLECTED.search(stderr)
    if match is None:
        raise RuntimeError(f"callgrind printed no instruction count: {stderr[-400:]}")
    return int(match.group(1))


def counted_run(batches_file: Path, adds: int, count: int) -> int:
    """Instructions of one child run over the first ``count`` batches in ``batches_file``."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
               str(Path(__file__).resolve()), "--child", str(batches_file), str(adds), str(count)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same hashing every run: set and dict orders, and their cost
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the counted run failed ({done.returncode}): {done.stderr[-800:]}")
    return collected(done.stderr)


def per_add(adds: int, count: int) -> dict:
    """Instructions per batch and per add of ``adds`` adds per batch (see the module docstring)."""
    from bench.bookie_batch import batches

    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
        batches_file = Path(tmp) / "batches.pickle"
        batches_file.write_bytes(pickle.dumps(batches(adds, count * LONG_FACTOR)))
        short, long = counted_run(batches_file, adds, count), counted_run(batches_file, adds, count * LONG_FACTOR)
    per_batch = (long - short) / (count * (LONG_FACTOR - 1))
    return {"adds_per_batch": adds, "batches": [count, count * LONG_FACTOR], "instructions": [short, long],
            "per_batch": round(per_batch), "per_add": round(per_batch / adds)}


def child(batches_file: Path, adds: int, count: int) -> None:
    """The counted process: ``bookie_batch.one_run`` over the first ``count`` ready-made batches."""
    raws = pickle.loads(batches_file.read_bytes())[:count]  # first: a missing file fails before the imports
    from bench.bookie_batch import one_run

    one_run(Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir()), adds, count, raws)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(Path(argv[1]), int(argv[2]), int(argv[3]))
        return 0
    parser = BenchParser(__doc__)
    parser.add_argument("--adds", type=int, nargs="+", default=[1, 100], help="adds per AddBatch (default 1 100)")
    parser.number("--batches", int, 50, help="batches in the short run (the long one has 3 times as many)")
    log_warnings()
    args = parser.parse_args(argv)
    if any(not 1 <= adds <= 10_000 for adds in args.adds):
        parser.error("--adds must each be from 1 to 10000")
    if args.batches > 10_000:
        parser.error("--batches must be at most 10000")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    return emit({"tool": "instructions", "load_average_1m": round(os.getloadavg()[0], 2),
                 "rows": [per_add(adds, args.batches) for adds in args.adds]}, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
