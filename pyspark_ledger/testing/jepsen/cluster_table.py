"""The README's table of the fault runs on the namespace cluster (issue 17 part 6), generated from a committed file.

Two kinds of run go in it, each a group of seeds with the commit and date it ran on: ``writers`` (the runs of
``testing/cluster/fault_run.py``: writers on the driver host, files ``run-netns-<seed>.json``) and ``spark``
(``testing/cluster/spark_fault_run.py``: a streaming query whose executors run on the workers, files
``run-spark-netns-<seed>.json``). ``python -m pyspark_ledger.testing.jepsen.cluster_table --commit SHA DIR``
puts the runs found in DIR into ``docs/jepsen-cluster-results.json`` (replacing the groups DIR holds runs of)
and README.md's block between ``<!-- jepsen-cluster-table -->`` and ``<!-- /jepsen-cluster-table -->`` from it;
without DIR it only remakes the block; ``--check`` changes nothing and exits 1 when the block differs. A failed
schedule is counted and named with its seed, never left out.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Iterable, Mapping

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.testing.jepsen.figures import write
from pyspark_ledger.testing.jepsen.readme_table import ROOT, latest_date, seed_ranges, write_or_check

RESULTS_PATH = "docs/jepsen-cluster-results.json"
BLOCK = re.compile(r"(<!-- jepsen-cluster-table -->\n)(?P<body>.*?)(<!-- /jepsen-cluster-table -->)", re.S)
GROUPS = {"writers": ("run-netns-", "writers on the driver host"),
          "spark": ("run-spark-netns-", "a Spark streaming query, executors on the workers")}
KEYS = ("seed", "ok", "acknowledged", "lost", "divergent", "duplicated", "restarts", "faults", "load_average")
TESTS = {"writers": "tests/cluster/test_cluster_faults.py -k test_a_fault_schedule_on_the_namespace_cluster",
         "spark": "tests/cluster/test_cluster_spark_faults.py -k test_a_streaming_write_on_the_cluster"}


def group_of(path: Path) -> str:
    """Which group a run file belongs to, by its name (the Spark prefix is the longer one: tried first)."""
    for group, (prefix, _) in sorted(GROUPS.items(), key=lambda item: -len(item[1][0])):
        if path.name.startswith(prefix):
            return group
    raise InvalidArgumentError(f"{path} is not a cluster run file ({', '.join(p for p, _ in GROUPS.values())}*)")


def summary(run: Mapping) -> dict:
    """What the committed file keeps of one run: its figures and its longest wait over any fault."""
    kept = {key: run[key] for key in KEYS if key in run}
    kept["ok"] = bool(run.get("ok")) and not run.get("notes")
    kept["longest_wait_s"] = max(run.get("unavailability_s", {}).values(), default=0.0)
    return kept


def merge(document: Mapping | None, directory: Path, commit: str, date: str) -> dict:
    """``document`` with the groups of the runs in ``directory`` replaced by them."""
    found: dict[str, list[dict]] = {}
    for path in sorted(directory.glob("run-*netns-*.json")):
        found.setdefault(group_of(path), []).append(summary(json.loads(path.read_text())))
    if not found:
        raise InvalidArgumentError(f"{directory} holds no run-netns-*.json or run-spark-netns-*.json files")
    merged = {"groups": dict((document or {}).get("groups", {}))}
    for group, runs in found.items():
        runs.sort(key=lambda run: run["seed"])
        merged["groups"][group] = {"commit": commit, "date": date, "runs": runs}
    return merged


def replay_command(group: str, seed: int) -> str:
    return f"LEDGER_CLUSTER_TESTS=1 LEDGER_JEPSEN_SEED={seed} python3 -m pytest -q -p no:cacheprovider {TESTS[group]}"


def render(document: Mapping) -> str:
    groups = [group for group in GROUPS if group in document.get("groups", {})]
    if not groups:
        raise InvalidArgumentError("the cluster results file holds no runs")
    data = {group: document["groups"][group] for group in groups}
    runs = {group: data[group]["runs"] for group in groups}
    line = ("*Fault runs on the namespace cluster (3 ZooKeeper servers, 5 bookies in 2 zones, Spark standalone; "
            "[docs/cluster.md](docs/cluster.md)).* Generated from `" + RESULTS_PATH + "`: "
            + "; ".join(f"{GROUPS[group][1]}: seeds {seed_ranges(run['seed'] for run in runs[group])}, commit "
                        f"{data[group]['commit'][:10]} on {data[group]['date']}, load average "
                        f"{_load(runs[group])}" for group in groups) + ".")

    def row(label: str, values: Iterable[str]) -> str:
        return f"| {label} | " + " | ".join(values) + " |"

    def total(key: str) -> list[str]:
        return [f"{sum(run.get(key, 0) for run in runs[group]):,}" for group in groups]
    lines = [line, "", "| | " + " | ".join(GROUPS[group][1] for group in groups) + " |",
             "| --- |" + " --- |" * len(groups),
             row("schedules run", (f"{len(runs[group]):,}" for group in groups)),
             row("schedules failed", (f"{sum(not run['ok'] for run in runs[group]):,}" for group in groups)),
             row("adds acknowledged (writers) or rows committed (Spark)", total("acknowledged")),
             row("acknowledged entries lost or changed (must be 0)", total("lost")),
             row("divergent (must be 0)", total("divergent")),
             row("rows written twice (must be 0)", ("—" if group == "writers" else total("duplicated")[i]
                                                    for i, group in enumerate(groups))),
             row("query restarts from its checkpoint", ("—" if group == "writers" else total("restarts")[i]
                                                        for i, group in enumerate(groups))),
             row("faults injected", (_faults(runs[group]) for group in groups)),
             row("longest wait for progress across a fault", (_longest(runs[group]) for group in groups))]
    failed = [(group, run) for group in groups for run in runs[group] if not run["ok"]]
    if failed:
        lines += ["", f"**{len(failed)} schedule(s) failed** (their numbers are in the totals above):"]
        lines += [f"- {GROUPS[group][1]}, seed {run['seed']}: lost {run.get('lost', 0)}, divergent "
                  f"{run.get('divergent', 0)}, duplicated {run.get('duplicated', 0)}; replay: "
                  f"`{replay_command(group, run['seed'])}`" for group, run in failed]
    return "\n".join(lines)


def _faults(runs: list[Mapping]) -> str:
    counts: dict[str, int] = {}
    for run in runs:
        for kind, count in run.get("faults", {}).items():
            counts[kind] = counts.get(kind, 0) + count
    return ", ".join(f"`{kind}` {count}" for kind, count in sorted(counts.items())) or "—"


def _longest(runs: list[Mapping]) -> str:
    seconds, seed = max((run.get("longest_wait_s", 0.0), run["seed"]) for run in runs)
    return f"{seconds:.1f} s (seed {seed})"


def _load(runs: list[Mapping]) -> str:
    loads = [run["load_average"] for run in runs if isinstance(run.get("load_average"), (int, float))]
    return f"{min(loads):.1f}–{max(loads):.1f}" if loads else "not recorded"


def regenerate(text: str, document: Mapping) -> str:
    if len(BLOCK.findall(text)) != 1:
        raise InvalidArgumentError("README.md must hold exactly one <!-- jepsen-cluster-table --> ... "
                                   "<!-- /jepsen-cluster-table --> block")
    return BLOCK.sub(lambda match: f"{match.group(1)}{render(document)}\n{match.group(3)}", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyspark_ledger.testing.jepsen.cluster_table",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, help="a results directory (LEDGER_JEPSEN_RESULTS)")
    parser.add_argument("--commit", help="the commit its runs were made on (required with a directory)")
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md's block differs from the file")
    parser.add_argument("--results", type=Path, default=ROOT / RESULTS_PATH)
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.directory is not None:
        if args.check or not args.commit:
            parser.error("a directory needs --commit and no --check")
        previous = json.loads(args.results.read_text()) if args.results.exists() else None
        write(args.results, merge(previous, args.directory, args.commit, latest_date([args.directory])))
    if not args.results.exists():
        parser.error(f"no results file at {args.results}: give a results directory")
    return write_or_check(args.readme, args.results, regenerate, args.check, "cluster fault table",
                          "pyspark_ledger.testing.jepsen.cluster_table")


if __name__ == "__main__":
    raise SystemExit(main())
