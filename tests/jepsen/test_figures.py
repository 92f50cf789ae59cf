"""Figures of Jepsen runs (pyspark_ledger/testing/jepsen/figures.py): the longest unavailability per fault kind, and
the totals of many runs read back from their JSON files."""
from __future__ import annotations

from pyspark_ledger.testing.faults.actions import Injected
from pyspark_ledger.testing.faults.schedule import KILL, PAUSE, Step
from pyspark_ledger.testing.jepsen import figures
from pyspark_ledger.testing.jepsen.history import OK, Event, History


def _acks(process: str, times) -> list[Event]:
    return [Event(f"{process}-{index}", OK, "add", process, at, 1, index) for index, at in enumerate(times)]


def test_unavailability_is_the_longest_wait_of_one_writer_overlapping_a_fault():
    history = History(_acks("w0", [0.0, 1.0, 5.0, 5.1]) + _acks("w1", [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 7.0]))
    injected = [Injected(Step(0, KILL, "b", 1), started=1.2, healed=2.2),
                Injected(Step(0, PAUSE, "b", 1), started=6.0, healed=6.5),
                Injected(Step(0, PAUSE, "b", 1), started=0.0, healed=9.0, error="OSError: refused")]
    assert figures.unavailability(history, injected) == {KILL: 4.0, PAUSE: 4.5}
    # w1 stopped on purpose at 2.5 (the fenced writer process): left out, only w0's waits count
    assert figures.unavailability(history, injected, exclude=("w1",)) == {KILL: 4.0, PAUSE: 0.5}
    # a fault from the very start: w2's first acknowledgement came 6 s after it began
    early = [Injected(Step(0, KILL, "b", 1), started=0.5, healed=5.0)]
    assert figures.unavailability(History(_acks("w2", [6.5, 6.6])), early) == {KILL: 6.0}


def test_a_run_records_how_long_each_fault_lasted():
    injected = [Injected(Step(0.5, PAUSE, "zookeeper", 3.0), started=10.0, healed=13.25),
                Injected(Step(1.0, KILL, "b", 1.0), started=11.0, error="OSError: gone")]
    assert figures.fault_lengths(injected) == [{"kind": PAUSE, "target": "zookeeper", "scheduled_s": 3.0,
                                                "lasted_s": 3.25}]


def test_runs_add_up(tmp_path):
    base = {"ok": True, "acknowledged": 10, "lost": 0, "divergent": 0}
    figures.write(tmp_path / "run-sqlite-1.json", {**base, "faults": {KILL: 1}, "unavailability_s": {KILL: 2.0}})
    figures.write(tmp_path / "run-sqlite-2.json", {**base, "ok": False, "divergent": 1, "faults": {KILL: 2, PAUSE: 1},
                                                   "unavailability_s": {KILL: 3.5, PAUSE: 1.0}})
    figures.write(tmp_path / "summary.json", {"not": "a run"})
    summary = figures.summarize(figures.load_runs(tmp_path))
    assert summary == {"schedules": 2, "failed_schedules": 1, "faults": {KILL: 3, PAUSE: 1}, "acknowledged": 20,
                       "lost": 0, "divergent": 1, "longest_unavailability_s": {KILL: 3.5, PAUSE: 1.0}}
    assert figures.main([]) == 2
