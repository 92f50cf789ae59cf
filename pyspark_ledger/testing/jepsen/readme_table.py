"""The README's results table of the fault suite (issue 17 part 6), generated from a committed results file.

``results_document`` turns the run files of results directories (``LEDGER_JEPSEN_RESULTS``) into the small
document committed as ``docs/jepsen-results.json``: per metadata store the totals and one short summary per
run (no schedules, no histories: a seed replays both), with the commit, date and load of the runs.
``render`` makes the Markdown of that document; ``regenerate`` puts it between ``<!-- jepsen-table -->`` and
``<!-- /jepsen-table -->`` in README.md and leaves everything else alone. A failed schedule is never hidden:
it is counted, named with its replay command, and its numbers stay in the totals.

``python -m pyspark_ledger.testing.jepsen.readme_table DIR [DIR ...]`` writes the results file from the runs
in DIRs and the README's table from it; without DIRs it only remakes the table; ``--check`` changes nothing
and exits 1 when the table differs from the file.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Mapping

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.testing.faults.schedule import KINDS
from pyspark_ledger.testing.jepsen.figures import load_runs, summarize, write

ROOT = Path(__file__).resolve().parents[3]
RESULTS_PATH = "docs/jepsen-results.json"
BLOCK = re.compile(r"(<!-- jepsen-table -->\n)(?P<body>.*?)(<!-- /jepsen-table -->)", re.S)
STORE_NAMES = {"sqlite": "SQLite", "zookeeper": "ZooKeeper"}
#: What each run keeps in the committed file.
RUN_KEYS = ("seed", "ok", "seconds", "faults", "acknowledged", "lost", "divergent", "ledgers", "failures",
            "unavailability_s", "notes", "load_average")
MAX_RUNS = 100_000


def replay_command(seed: int, metadata: str) -> str:
    return (f"LEDGER_JEPSEN_SEED={seed} LEDGER_JEPSEN_METADATA={metadata} "
            f"python3 -m pytest -q -p no:cacheprovider tests/jepsen/test_local_schedules.py -k test_schedule")


def _run_summary(run: Mapping) -> dict:
    summary = {key: run[key] for key in RUN_KEYS if key in run}
    # a run with notes failed its test even if every check passed (runs recorded before the runner said so)
    summary["ok"] = bool(run["ok"]) and not run.get("notes")
    if "paused_writer" in run:  # how the paused writer stopped, without the message's details
        summary["paused_writer"] = ": ".join(str(run["paused_writer"]).split(": ")[:2])
    return summary


def results_document(runs: Iterable[Mapping], commit: str, date: str, load: str | None = None) -> dict:
    """The committed results file: per store its seeds, totals and run summaries; ``load`` (text) when the runs
    did not record their load average themselves."""
    stores: dict[str, list[Mapping]] = {}
    for run in runs:
        metadata = run.get("metadata")
        if metadata not in STORE_NAMES:
            raise InvalidArgumentError(f"a run names metadata store {metadata!r}; known: {', '.join(STORE_NAMES)}")
        stores.setdefault(metadata, []).append(run)
    if not stores:
        raise InvalidArgumentError("no runs: give results directories holding run-<metadata>-<seed>.json files")
    if sum(len(found) for found in stores.values()) > MAX_RUNS:
        raise InvalidArgumentError(f"more than {MAX_RUNS} runs")
    document = {"commit": commit, "date": date, "stores": {}}
    loads = [run["load_average"] for found in stores.values() for run in found if "load_average" in run]
    if load:
        document["load_average"] = load
    elif loads:
        document["load_average"] = (f"{min(loads):.2f}–{max(loads):.2f} (median {statistics.median(loads):.2f}) "
                                    f"at the end of its runs")
    for metadata, found in sorted(stores.items()):
        found = sorted(found, key=lambda run: run["seed"])
        seeds = [run["seed"] for run in found]
        if len(set(seeds)) != len(seeds):
            raise InvalidArgumentError(f"{metadata}: a seed appears twice among the runs ({seeds})")
        summaries = [_run_summary(run) for run in found]
        document["stores"][metadata] = {"seeds": seeds, "totals": summarize(summaries), "runs": summaries}
    return document


def seed_ranges(seeds: Iterable[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``1–3, 7``."""
    parts: list[str] = []
    ordered = sorted(seeds)
    start = previous = None
    for seed in ordered + [None]:
        if previous is not None and seed == previous + 1:
            previous = seed
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}–{previous}")
        start = previous = seed
    return ", ".join(parts)


def _longest(runs: list[Mapping], kind: str) -> str:
    seconds, seed = max(((run["unavailability_s"].get(kind, -1.0), run["seed"]) for run in runs), default=(-1.0, 0))
    return "—" if seconds < 0 else f"{seconds:.1f} s (seed {seed})"


def render(document: Mapping) -> str:
    """The Markdown between the README's markers: a line naming the runs, the totals per store, then per fault
    kind how often it was injected and the longest a writer waited for an acknowledgement across one."""
    stores = document["stores"]
    names = list(stores)
    heading = " | ".join(STORE_NAMES[name] for name in names)
    seeds = " and ".join(f"{seed_ranges(stores[name]['seeds'])} ({STORE_NAMES[name]})" for name in names)
    line = (f"*Fault suite: seeded schedules against five bookies behind fault proxies ([docs/jepsen.md]"
            f"(docs/jepsen.md)).* Generated from `{RESULTS_PATH}`: runs of commit {document['commit'][:10]} on "
            f"{document['date']}, seeds {seeds}, 10 s of faults per schedule, 2 cores shared with other work, "
            f"load average {document.get('load_average', 'not recorded')}.")
    totals = {name: stores[name]["totals"] for name in names}

    def row(label: str, values) -> str:
        return f"| {label} | " + " | ".join(values) + " |"
    lines = [line, "", f"| | {heading} |", "| --- |" + " --- |" * len(names),
             row("schedules run", (f"{totals[name]['schedules']:,}" for name in names)),
             row("schedules failed", (f"{totals[name]['failed_schedules']:,}" for name in names)),
             row("adds acknowledged", (f"{totals[name]['acknowledged']:,}" for name in names)),
             row("acknowledged entries lost or changed (must be 0)", (f"{totals[name]['lost']:,}" for name in names)),
             row("divergent: acknowledged past a ledger's end, or readers disagreeing (must be 0)",
                 (f"{totals[name]['divergent']:,}" for name in names))]
    kinds = [kind for kind in KINDS if any(kind in totals[name]["faults"] for name in names)]
    lines += ["", "| fault kind | " + " | ".join(f"injected, {STORE_NAMES[name]}" for name in names) + " | "
              + " | ".join(f"longest wait for an add, {STORE_NAMES[name]}" for name in names) + " |",
              "| --- |" + " ---: |" * (2 * len(names))]
    for kind in kinds:
        lines.append(row(f"`{kind}`", [f"{totals[name]['faults'].get(kind, 0):,}" for name in names]
                         + [_longest(stores[name]["runs"], kind) for name in names]))
    failed = [(name, run) for name in names for run in stores[name]["runs"] if not run["ok"]]
    if failed:
        lines += ["", f"**{len(failed)} schedule(s) failed** (their numbers are in the totals above):"]
        lines += [f"- {STORE_NAMES[name]} seed {run['seed']}: {run.get('failures', 0)} failed check(s), lost "
                  f"{run['lost']}, divergent {run['divergent']}"
                  + "".join(f"; {note}" for note in run.get("notes", ()))
                  + f"; replay: `{replay_command(run['seed'], name)}`" for name, run in failed]
    return "\n".join(lines)


def regenerate(text: str, document: Mapping) -> str:
    """``text`` (README.md) with the block between the markers replaced by ``render(document)``."""
    if len(BLOCK.findall(text)) != 1:
        raise InvalidArgumentError("README.md must hold exactly one <!-- jepsen-table --> ... "
                                   "<!-- /jepsen-table --> block")
    return BLOCK.sub(lambda match: f"{match.group(1)}{render(document)}\n{match.group(3)}", text)


def latest_date(directories) -> str:
    """The UTC day of the newest run file in ``directories``."""
    times = [path.stat().st_mtime for directory in directories for path in Path(directory).glob("run-*.json")]
    return datetime.fromtimestamp(max(times), timezone.utc).strftime("%Y-%m-%d") if times else "unknown"


def _head_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    """``python -m pyspark_ledger.testing.jepsen.readme_table [DIR ...]``: with results directories, write the
    committed results file from their runs; then README.md's table from that file. ``--check``: change nothing,
    exit 1 unless the README's table is the one generated from the committed results file."""
    parser = argparse.ArgumentParser(prog="python -m pyspark_ledger.testing.jepsen.readme_table",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="*", metavar="DIR", help="results directories (LEDGER_JEPSEN_RESULTS)")
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md's table differs from --results")
    parser.add_argument("--results", type=Path, default=ROOT / RESULTS_PATH,
                        help=f"the committed results file (default {RESULTS_PATH})")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="the README (default README.md)")
    parser.add_argument("--commit", help="the commit the runs were made on (default: git HEAD of the checkout)")
    parser.add_argument("--date", help="the date of the runs (default: of the newest run file)")
    parser.add_argument("--load", help="the load average during the runs, as text (default: from the runs)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.directories and args.check:
        parser.error("--check compares README.md with the committed results file: give no directories")
    if args.directories:
        runs = [run for directory in args.directories for run in load_runs(directory)]
        write(args.results, results_document(runs, args.commit or _head_commit(),
                                             args.date or latest_date(args.directories), args.load))
    if not args.results.exists():
        parser.error(f"no results file at {args.results}: give results directories (LEDGER_JEPSEN_RESULTS)")
    return write_or_check(args.readme, args.results, regenerate, args.check, "fault-suite table",
                          "pyspark_ledger.testing.jepsen.readme_table")


def write_or_check(readme: Path, results: Path, make: Callable[[str, Mapping], str], check: bool, what: str,
                   module: str) -> int:
    """README.md's block remade by ``make(text, results document)``: written, or with ``check`` only compared
    (exit status 1 and a line saying what to run when it differs)."""
    text = readme.read_text()
    fresh = make(text, json.loads(results.read_text()))
    if check:
        if fresh != text:
            print(f"{readme}'s {what} differs from {results}: run python -m {module}", file=sys.stderr)
            return 1
        return 0
    readme.write_text(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
