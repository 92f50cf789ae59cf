"""Jepsen-style schedules on one host (issue 17 parts 4-5; docs/jepsen.md): writers append through fault proxies
to five real bookies while a seeded schedule partitions, slows, stalls, resets, pauses, kills and fills the disks
of bookies, and pauses a writer process whose ledger is recovered meanwhile (on waking it must be fenced,
docs/protocol.md F1); then everything heals, every ledger is recovered and read back by two readers, and the
checker verifies I1-I5.

CI runs a small budget (seeds 1-3). ``LEDGER_JEPSEN_SCHEDULES=300`` runs seeds 1..300;
``LEDGER_JEPSEN_SEED=S`` replays one seed; ``LEDGER_JEPSEN_METADATA=zookeeper`` runs them on a real ZooKeeper;
``LEDGER_JEPSEN_RESULTS=DIR`` keeps each run's figures (``run-<metadata>-<seed>.json``) and a ``summary.json``.
A failure prints the seed, the replay command, the schedule and the minimal history of the failing ledgers.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.testing.jepsen.seeds import seeds_from_env
from pyspark_ledger.testing.faults import schedule as sched
from pyspark_ledger.testing.jepsen import figures
from pyspark_ledger.testing.jepsen.runner import RunConfig, run
from pyspark_ledger.testing.zookeeper import ZooKeeperServer

MAX_SCHEDULES = 100_000


def _seeds() -> list[int]:
    return seeds_from_env(default=3, limit=MAX_SCHEDULES)


METADATA = os.environ.get("LEDGER_JEPSEN_METADATA", "sqlite")
RESULTS = os.environ.get("LEDGER_JEPSEN_RESULTS")
_runs: list[dict] = []


def _replay(seed: int, metadata: str) -> str:
    return (f"LEDGER_JEPSEN_SEED={seed} LEDGER_JEPSEN_METADATA={metadata} "
            f"python3 -m pytest -q -p no:cacheprovider tests/jepsen/test_local_schedules.py -k 'test_schedule'")


def _run_and_check(config: RunConfig, tmp_path: Path) -> dict:
    outcome = run(config, tmp_path)
    _runs.append(outcome.figures)
    if RESULTS:
        figures.write(Path(RESULTS) / f"run-{config.metadata}-{config.seed}.json", outcome.figures)
        figures.write(Path(RESULTS) / "summary.json", figures.summarize(_runs))
    if not outcome.ok:
        shutil.copytree(tmp_path, Path(RESULTS or tmp_path.parent) / f"failed-{config.seed}", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.log", "entry-logs", "journal", "*.db*"))
        schedule = sched.describe(outcome.steps)
        pytest.fail(f"{outcome.result.report(config.seed, _replay(config.seed, config.metadata))}\n"
                    f"notes: {outcome.notes}\nschedule:\n{schedule}\nfigures: {outcome.figures}", pytrace=False)
    assert outcome.figures["acknowledged"] > 0, "nothing was acknowledged: the run checked nothing"
    return outcome.figures


@pytest.mark.parametrize("seed", _seeds())
def test_schedule(seed, tmp_path):
    if METADATA == "zookeeper" and not ZooKeeperServer.is_available():
        pytest.skip(f"ZooKeeper: {ZooKeeperServer.unavailable_reason()}")
    kinds = sched.BOOKIE_KINDS + (sched.ZK_KINDS if METADATA == "zookeeper" else ())
    numbers = _run_and_check(RunConfig(seed=seed, metadata=METADATA, duration_s=10.0, kinds=kinds,
                                       process_writer=True), tmp_path)
    assert numbers["faults"].get(sched.WRITER_PAUSE) == 1  # it ended with an error, nothing acknowledged late


def test_a_paused_writer_wakes_up_fenced(tmp_path):
    """docs/protocol.md F1 alone: no other fault; the writer process is paused (SIGSTOP) for less than its add
    timeout, its ledger is recovered meanwhile, and on SIGCONT every add it makes must fail (the bookies' fence),
    nothing acknowledged past the recovered end."""
    numbers = _run_and_check(RunConfig(seed=5, duration_s=6.0, steps=0, writers=1, process_writer=True), tmp_path)
    assert numbers["faults"] == {sched.WRITER_PAUSE: 1}
    assert numbers["paused_writer"].startswith("stopped: LedgerFencedError"), numbers["paused_writer"]


@pytest.mark.skipif(not ZooKeeperServer.is_available(), reason=f"ZooKeeper: {ZooKeeperServer.unavailable_reason()}")
def test_zookeeper_pauses_and_session_expiry(tmp_path):
    """ZooKeeper metadata: the ZooKeeper server is paused, killed and restarted (the leader lost), and a client's
    session expired, among bookie faults."""
    config = RunConfig(seed=2, metadata="zookeeper", duration_s=12.0, steps=6,
                       kinds=(sched.ZK_PAUSE, sched.ZK_EXPIRY, sched.ZK_KILL, sched.PARTITION, sched.KILL))
    numbers = _run_and_check(config, tmp_path)
    assert len(set(numbers["faults"]) & set(sched.ZK_KINDS)) >= 2, numbers


@pytest.mark.skipif(not ZooKeeperServer.is_available(), reason=f"ZooKeeper: {ZooKeeperServer.unavailable_reason()}")
def test_a_zookeeper_pause_heals_on_time_while_the_paused_writer_is_recovered(tmp_path):
    """ZooKeeper is paused across the writer pause, so recovering the paused writer's ledger must wait for
    ZooKeeper. That wait holds up no other fault: ZooKeeper resumes when its step ends (not once the recovery gave
    up, which made it last 10 s instead of 3), the recovery then succeeds and the writer wakes fenced (F1)."""
    steps = (sched.Step(0.5, sched.ZK_PAUSE, "zookeeper", 3.0), sched.Step(1.0, sched.WRITER_PAUSE, "writer-p", 2.0))
    config = RunConfig(seed=4, metadata="zookeeper", bookies=3, duration_s=6.0, writers=1, schedule=steps,
                       process_writer=True)
    numbers = _run_and_check(config, tmp_path)
    lasted = {fault["kind"]: fault["lasted_s"] for fault in numbers["fault_lengths"]}
    assert lasted[sched.ZK_PAUSE] < 3.0 + 1.5, numbers["fault_lengths"]
    assert numbers["paused_writer"].startswith("stopped: LedgerFencedError"), numbers["paused_writer"]


def test_a_schedule_is_the_same_for_the_same_seed():
    hosts = {f"bookie-{index}": "bookie" for index in range(5)} | {"zookeeper": "zookeeper", "writer-p": "writer"}
    first = sched.generate(42, hosts, kinds=sched.KINDS, steps=12)
    assert first == sched.generate(42, hosts, kinds=sched.KINDS, steps=12)
    assert first != sched.generate(43, hosts, kinds=sched.KINDS, steps=12)
    assert sched.describe(first).count("\n") == len(first) - 1
    for step in first:  # never two faults at once on one host, at most two bookies faulty at any moment
        overlapping = [other for other in first if other is not step and other.at_s <= step.ends_s
                       and step.at_s <= other.ends_s]
        assert all(other.target != step.target for other in overlapping)
        active = [other for other in first if other.at_s <= step.at_s <= other.ends_s]
        assert sum(hosts[other.target] == "bookie" for other in active) <= 2


@pytest.mark.parametrize("kwargs, words", [
    ({"seed": -1}, "seed"), ({"seed": 1, "steps": -1}, "steps"), ({"seed": 1, "kinds": ("flood",)}, "flood"),
    ({"seed": 1, "duration_s": 0}, "duration_s")])
def test_bad_schedule_arguments_are_refused(kwargs, words):
    with pytest.raises(InvalidArgumentError, match=words):
        sched.generate(hosts={"bookie-0": "bookie"}, **kwargs)
