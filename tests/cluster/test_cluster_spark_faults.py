"""The Spark streaming exactly-once fault run on the namespace cluster (issue 17 part 5; docs/jepsen.md, "The
Spark run on the namespace cluster"; docs/protocol.md S1).

Quick (no cluster): the schedule is seeded and holds what the run must inject; the executor kill finds a
worker's executors among its descendants, kills them and heals once the worker runs a new one.

Slow (minutes per seed; only with ``LEDGER_CLUSTER_TESTS=1``): the whole cluster (3 ZooKeeper servers, 5 bookies
in 2 zones, a Spark master, 2 workers, a driver host), then ``cluster.spark_fault_run`` on the driver host: a
streaming query whose tasks run on the workers' executors writes the id source into a ``ledger`` stream while a
worker is cut from one or two bookies, a bookie is killed and restarted, another paused, the ZooKeeper leader
killed and restarted, an executor killed and the driver crashed once between the sink's commit and Spark's;
after healing, a new batch within the bound, and every id exactly once in a batch read.
``LEDGER_JEPSEN_SEED`` / ``LEDGER_JEPSEN_SCHEDULES`` / ``LEDGER_JEPSEN_RESULTS`` as for the other cluster fault
test (figures as ``DIR/run-spark-netns-<seed>.json``).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.testing.cluster import NetnsCluster, default_spec, netns
from pyspark_ledger.testing.cluster.cluster import DRIVER_NICE
from pyspark_ledger.testing.cluster.spark_fault_run import EXECUTOR_KILL, ExecutorKiller, schedule
from pyspark_ledger.testing.faults import schedule as sched
from pyspark_ledger.testing.jepsen import figures
from pyspark_ledger.testing.jepsen.spark_run import DRIVER_CRASH
from tests.cluster.conftest import cluster_tests, jepsen_seeds, run_on_driver, skip_unless_services
from tests.waiting import wait_until

BOOKIES = [f"bk{index}" for index in range(1, 6)]
WORKERS = ["worker1", "worker2"]
RUN_TIMEOUT_S = 1200
CLUSTER_TESTS = cluster_tests() == "all"


def test_the_spark_cluster_schedule_is_seeded_and_injects_every_kind():
    first = schedule(3, BOOKIES, WORKERS)
    assert first == schedule(3, BOOKIES, WORKERS) and first != schedule(4, BOOKIES, WORKERS)
    seen = set()
    for seed in range(1, 31):
        steps = schedule(seed, BOOKIES, WORKERS)
        kinds = Counter(step.kind for step in steps)
        assert kinds[sched.KILL] == kinds[sched.PAUSE] == kinds[sched.ZK_KILL] == kinds[EXECUTOR_KILL] == 1, steps
        cut = next(step for step in steps if step.kind in (sched.PARTITION, sched.ONE_WAY))
        assert cut.params["peers"] in (("worker1",), ("worker2",)) and len(cut.params["group"]) <= 1, cut
        seen.add((cut.params.get("direction", "both"), len(cut.params["group"]) + 1))
        bookie_steps = [step for step in steps if step.target in BOOKIES]
        for before, after in zip(bookie_steps, bookie_steps[1:]):   # one bookie fault at a time
            assert before.ends_s < after.at_s, steps
        targets = {step.target for step in bookie_steps} | set(cut.params["group"])
        assert len(targets) == len(bookie_steps) + len(cut.params["group"]) == 3 + len(cut.params["group"]), steps
        assert all(step.ends_s < 26.0 for step in steps), steps
    assert {(direction, count) for direction in ("both", "in", "out") for count in (1, 2)} <= seen, seen
    with pytest.raises(InvalidArgumentError, match="4 bookies"):
        schedule(1, BOOKIES[:3], WORKERS)
    with pytest.raises(InvalidArgumentError, match="duration_s"):
        schedule(1, BOOKIES, WORKERS, duration_s=10.0)


RESPAWNING_WORKER = """
import subprocess, sys, time
while True:   # like a Spark worker: an executor that dies is replaced
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "CoarseGrainedExecutorBackend"])
    child.wait()
"""


def test_executor_kill_kills_the_workers_executor_and_heals_once_a_new_one_runs():
    worker = subprocess.Popen([sys.executable, "-c", RESPAWNING_WORKER], start_new_session=True)
    try:
        killer = ExecutorKiller({"hosts": [{"name": "worker1", "processes": {"spark-worker": {"pid": worker.pid}}},
                                           {"name": "bk1", "processes": {"bookie": {"pid": 1}}}]})
        wait_until(lambda: len(killer.executors("worker1")) == 1, timeout=30, what="the executor to start")
        first = killer.executors("worker1")
        heal = killer(sched.Step(0.0, EXECUTOR_KILL, "worker1", 1.0))
        assert killer.killed == first
        heal()    # returns once another executor runs
        assert killer.executors("worker1") and first[0] not in killer.executors("worker1")
        with pytest.raises(InvalidArgumentError, match="runs no Spark worker"):
            killer.executors("bk1")
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)


@pytest.mark.timeout(RUN_TIMEOUT_S + 900)
@pytest.mark.skipif(not CLUSTER_TESTS, reason="the Spark fault run on the namespace cluster takes minutes: set "
                                              "LEDGER_CLUSTER_TESTS=1 to run it")
@pytest.mark.parametrize("seed", jepsen_seeds() if CLUSTER_TESTS else [1])
def test_a_streaming_write_on_the_cluster_under_faults_is_exactly_once(seed, tmp_path):
    skip_unless_services()
    cluster = NetnsCluster(default_spec(), tmp_path / "cluster")
    started = time.monotonic()
    with cluster:
        up_s = time.monotonic() - started
        numbers, done = run_on_driver(cluster, "pyspark_ledger.testing.cluster.spark_fault_run", seed,
                                      tmp_path / "run", up_s=up_s, timeout_s=RUN_TIMEOUT_S, nice=DRIVER_NICE)
        numbers["run_s"] = round(time.monotonic() - started - up_s, 1)
        results = os.environ.get("LEDGER_JEPSEN_RESULTS")
        if results:
            figures.write(Path(results) / f"run-spark-netns-{seed}.json", numbers)
        print(json.dumps({key: numbers.get(key) for key in ("seed", "ok", "acknowledged", "duplicated", "lost",
                                                            "restarts", "faults", "unavailability_s", "seconds",
                                                            "cluster_up_s", "run_s", "load_average", "phases_s",
                                                            "executors_killed", "fault_errors")}, sort_keys=True))
        assert done.returncode == 0, f"seed {seed} failed:\n{done.stderr[-6000:]}\nfigures: {numbers}"
    assert not [name for name in netns.list_namespaces() if name.startswith(cluster.prefix)]
    assert numbers["lost"] == numbers["duplicated"] == 0 and numbers["acknowledged"] > 0, numbers
    expected = Counter(step.kind for step in schedule(seed, BOOKIES, WORKERS))
    assert numbers["faults"] == {**expected, DRIVER_CRASH: 1}, numbers
    assert numbers["executors_killed"] >= 1 and not numbers["fault_errors"], numbers
    assert any(batch is not None for batch in numbers["replayed_batches"]), "no batch was replayed"
