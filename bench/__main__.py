"""Run every benchmark, then write bench/results/latest.json, latest.md and the PNG plots.

Usage: ``python -m bench [--quick] [--only NAME ...] [--results DIR] [--update-readme]``
and ``python -m bench --report-only [--update-readme]`` (tables, plots and README from the results file).

Each benchmark (``bench/registry.py``) runs as its own process (``python bench/<script> ... --out FILE``),
one after the other; ours and its peer alternate (replication, NATS JetStream, replication, ...).
``--only NAME ...`` runs some of them and replaces their records in an existing results file of the same
mode (the file lists such reruns). ``--quick`` runs each once with short runs (a few minutes in all on a
quiet machine: a smoke run, not a measurement); the full mode repeats the pairs and the bookie benchmark
3 times and reports median and range. The results file keeps every JSON document the benchmarks wrote,
with the machine, the load averages before and after each run and the whole session, the git commit and
the date. A benchmark that fails is recorded with its
error and the others still run; the exit status is 1 then.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import plots, readme, report
from bench.registry import HERE, Benchmark, by_name, schedule

ROOT = HERE.parent
RESULTS = HERE / "results"


def loads() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def machine() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
        with open("/proc/meminfo") as handle:
            memory_kib = int(next(line for line in handle if line.startswith("MemTotal")).split()[1])
    except (OSError, StopIteration, ValueError):
        memory_kib = 0
    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(memory_kib / 1024 ** 2, 1),
            "platform": platform.platform(), "python": platform.python_version()}


def git_state() -> dict:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        return done.stdout.strip() if done.returncode == 0 else ""
    return {"commit": git("rev-parse", "HEAD"), "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no"))}


def stop_group(process: subprocess.Popen) -> None:
    """End a benchmark that did not finish and every process it started (bookies, servers, Spark):
    SIGTERM to its process group, SIGKILL to what is left after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; what it started may not be
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(1)


def run_one(benchmark: Benchmark, quick: bool, directory: Path, repetition: int) -> dict:
    """One run of one benchmark as a child process; its JSON, or why there is none."""
    started_load, started = loads(), time.perf_counter()
    record = {"repetition": repetition, "arguments": list(benchmark.arguments(quick)), "started": now(),
              "load_average_before": started_load}
    if not benchmark.path.exists():
        if not benchmark.optional:
            return {**record, "error": f"{benchmark.path} does not exist"}
        return {**record, "skipped": f"{benchmark.script} is not in this checkout"}
    out = directory / f"{benchmark.name}-{repetition}.json"
    command = [sys.executable, str(benchmark.path), *benchmark.arguments(quick), "--out", str(out)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # its own process group: see stop_group
    try:
        _, stderr = process.communicate(timeout=benchmark.timeout_s)
        failure = None if process.returncode == 0 else f"exit status {process.returncode}: {stderr[-1500:]}"
    except subprocess.TimeoutExpired:
        stop_group(process)
        failure = f"timed out after {benchmark.timeout_s} s"
    except BaseException:  # Ctrl-C: no benchmark process outlives the runner
        stop_group(process)
        raise
    record.update(seconds=round(time.perf_counter() - started, 1), load_average_after=loads())
    if failure is None and out.exists():
        record["result"] = json.loads(out.read_text())
        if "skipped" in record["result"]:
            record["skipped"] = record["result"]["skipped"]
    else:
        record["error"] = failure or "the benchmark wrote no JSON"
    return record


def run_all(benchmarks: list[Benchmark], quick: bool) -> dict:
    session = {"schema": 1, "mode": "quick" if quick else "full",
               "date": now(),
               "git": git_state(), "machine": machine(), "load_average_before": loads(),
               "note": ("quick: short runs, each once -- a smoke run, not a measurement" if quick else
                        "full: pairs interleaved, repeated; median and range"),
               "benchmarks": {benchmark.name: [] for benchmark in benchmarks}}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-all-") as tmp:
        for benchmark, repetition in schedule(benchmarks, quick):
            print(f"[bench] {benchmark.name} #{repetition + 1} (load {loads()[0]})", file=sys.stderr, flush=True)
            record = run_one(benchmark, quick, Path(tmp), repetition)
            status = record.get("error") or record.get("skipped") or f"done in {record.get('seconds')} s"
            print(f"[bench] {benchmark.name} #{repetition + 1}: {status.splitlines()[0] if status else ''}",
                  file=sys.stderr, flush=True)
            session["benchmarks"][benchmark.name].append(record)
    session["seconds"] = round(time.perf_counter() - started, 1)
    session["load_average_after"] = loads()
    return session


def merge(previous: dict, session: dict) -> dict:
    """``previous`` with the benchmarks of ``session`` (a run with --only) replacing its records of them."""
    merged = {**previous, "benchmarks": {**previous.get("benchmarks", {}), **session["benchmarks"]}}
    merged["load_average_after"] = session["load_average_after"]
    merged["reruns"] = previous.get("reruns", []) + [
        {"benchmarks": sorted(session["benchmarks"]), "date": session["date"], "git": session["git"],
         "load_average_before": session["load_average_before"], "load_average_after": session["load_average_after"]}]
    return merged


def write_outputs(session: dict, results: Path, update_readme: bool) -> None:
    results.mkdir(parents=True, exist_ok=True)
    tables = report.build_tables(session)
    (results / "latest.md").write_text(report.markdown_document(session, tables))
    for path in plots.write_plots(tables, results):
        print(f"[bench] wrote {path}", file=sys.stderr)
    if update_readme:
        path = ROOT / "README.md"
        path.write_text(readme.regenerate(path.read_text(), session))
        print(f"[bench] updated the generated tables in {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, each once (a few minutes; a smoke run)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="run only these benchmarks; their records replace theirs in an existing latest.json")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"where to write (default {RESULTS})")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: tables and plots from the existing latest.json")
    parser.add_argument("--update-readme", action="store_true",
                        help="also regenerate README.md's benchmark tables from the results")
    args = parser.parse_args(argv)
    latest = args.results / "latest.json"
    if args.report_only:
        if not latest.exists():
            parser.error(f"--report-only needs {latest}; run python -m bench first")
        session = json.loads(latest.read_text())
        failed = False
    else:
        try:
            benchmarks = by_name(args.only)
        except ValueError as error:
            parser.error(str(error))
        previous = json.loads(latest.read_text()) if args.only and latest.exists() else None
        mode = "quick" if args.quick else "full"
        if previous is not None and previous.get("mode") != mode:
            parser.error(f"--only in {mode} mode cannot update {latest}, a results file of {previous.get('mode')} "
                         "mode: run them all, or give --results another directory")
        session = run_all(benchmarks, args.quick)
        if previous is not None:  # the other benchmarks keep their records
            session = merge(previous, session)
        args.results.mkdir(parents=True, exist_ok=True)
        latest.write_text(json.dumps(session, indent=1) + "\n")
        print(f"[bench] wrote {latest}", file=sys.stderr)
        failed = any("error" in record for records in session["benchmarks"].values() for record in records)
    write_outputs(session, args.results, args.update_readme)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
