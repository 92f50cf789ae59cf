"""Figures of Jepsen-style runs, as JSON for the README's results table (issue 17 part 6).

``unavailability(history, injected)``: per fault kind, the longest stretch without any acknowledged add
that overlaps a fault of that kind (from the last acknowledgement before the stretch to the first one
after it). ``run_figures`` collects one run's figures; ``summarize`` adds up many runs: schedules, faults
per kind, acknowledged, lost, divergent, and the longest unavailability per kind (``python -m
pyspark_ledger.testing.jepsen.figures DIR`` prints them; ``readme_table`` makes the README's table of them).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Mapping

from pyspark_ledger.testing.jepsen.history import OK, History


def unavailability(history: History, injected, exclude: Iterable[str] = ()) -> dict[str, float]:
    """Per fault kind, the longest time one writer waited between two acknowledged adds, over the stretches
    that overlap a fault of that kind (a writer that got nothing acknowledged after the fault began counts
    until the fault healed; one that had nothing acknowledged before it, from the fault's start to its first). The writers named in ``exclude`` are left out: the runner's writer process is
    paused and then fenced on purpose, so its silence after that measures the schedule, not the store."""
    acks: dict[str, list[float]] = {}
    exclude = set(exclude)
    for event in history:
        if event.action == "add" and event.kind == OK and event.process not in exclude:
            acks.setdefault(event.process, []).append(event.time)
    longest: dict[str, float] = {}
    for record in injected:
        if record.error:
            continue
        start = record.started
        end = record.healed if record.healed is not None else start
        worst = 0.0
        for times in acks.values():
            times.sort()
            for before, after in zip(times, times[1:]):
                if after >= start and before <= end:
                    worst = max(worst, after - before)
            if times and times[0] <= start and times[-1] < end:
                worst = max(worst, end - max(times[-1], start))
            if times and times[0] > start:   # nothing acknowledged yet when the fault began: it waited from there
                worst = max(worst, times[0] - start)
        kind = record.step.kind
        longest[kind] = round(max(longest.get(kind, 0.0), worst), 3)
    return longest


def run_figures(seed: int, metadata: str, result, injected, history: History, seconds: float,
                steps: Iterable, exclude: Iterable[str] = ()) -> dict:
    """One run's figures; ``exclude``: writers left out of the unavailability (``unavailability``), whose
    figure with them counted is kept as ``unavailability_all_writers_s``."""
    exclude = tuple(exclude)
    per_kind: dict[str, int] = {}
    for record in injected:
        if not record.error:
            per_kind[record.step.kind] = per_kind.get(record.step.kind, 0) + 1
    return {"seed": seed, "metadata": metadata, "ok": result.ok, "seconds": round(seconds, 2),
            "faults": per_kind, **result.figures(), "unavailability_s": unavailability(history, injected, exclude),
            **({"unavailability_all_writers_s": unavailability(history, injected)} if exclude else {}),
            "load_average": round(os.getloadavg()[0], 2), "schedule": [str(step) for step in steps],
            "fault_errors": [f"{r.step}: {r.error}" for r in injected if r.error],
            "fault_lengths": fault_lengths(injected)}


def fault_lengths(injected) -> list[dict]:
    """Each fault applied: its kind, target, the seconds the schedule gave it and the seconds it lasted (from
    the start of its apply to the end of its heal; a restart lasts until the server serves again)."""
    return [{"kind": r.step.kind, "target": r.step.target, "scheduled_s": r.step.duration_s,
             "lasted_s": round(r.healed - r.started, 3)} for r in injected if not r.error and r.healed is not None]


def summarize(runs: Iterable[Mapping]) -> dict:
    runs = list(runs)
    faults: dict[str, int] = {}
    longest: dict[str, float] = {}
    for run in runs:
        for kind, count in run["faults"].items():
            faults[kind] = faults.get(kind, 0) + count
        for kind, seconds in run["unavailability_s"].items():
            longest[kind] = max(longest.get(kind, 0.0), seconds)
    return {"schedules": len(runs), "failed_schedules": sum(not run["ok"] for run in runs), "faults": faults,
            "acknowledged": sum(run["acknowledged"] for run in runs), "lost": sum(run["lost"] for run in runs),
            "divergent": sum(run["divergent"] for run in runs), "longest_unavailability_s": longest}


def write(path: str | os.PathLike, document: Mapping) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    return path


def load_runs(directory: str | os.PathLike) -> list[dict]:
    """Every ``run-*.json`` of a results directory (``LEDGER_JEPSEN_RESULTS``)."""
    return [json.loads(path.read_text()) for path in sorted(Path(directory).glob("run-*.json"))]


def main(argv: list[str] | None = None) -> int:
    """``python -m pyspark_ledger.testing.jepsen.figures DIR [DIR ...]``: the totals of the runs in DIR(s)."""
    import sys

    directories = sys.argv[1:] if argv is None else argv
    if not directories:
        print("usage: python -m pyspark_ledger.testing.jepsen.figures RESULTS_DIR [RESULTS_DIR ...]", file=sys.stderr)
        return 2
    runs = [run for directory in directories for run in load_runs(directory)]
    print(json.dumps(summarize(runs), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
