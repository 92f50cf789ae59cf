"""A Spark Structured Streaming job under faults, checked exactly once (issue 17 part 5; docs/jepsen.md; docs/protocol.md S1).

A local-mode streaming query writes a deterministic source of unique ids (jepsen/id_source.py) into a ``ledger`` stream
through five bookies behind fault proxies, while a seeded schedule kills (-9, then restarts), partitions,
pauses and resets bookies; a query that dies is restarted from its checkpoint. After healing, a batch read
of the whole stream must hold every id of the committed batches exactly once and nothing else.

CI runs seed 1 on SQLite (~130 s with Spark's start). ``LEDGER_JEPSEN_METADATA=zookeeper`` runs the seeds on a
real ZooKeeper, the schedule drawing its faults too (the server paused, killed and restarted, the job's sessions
expired); it stays out of CI, which with seed 1 on ZooKeeper as well took 233 s (load 14-24) instead of ~130.
``LEDGER_JEPSEN_SCHEDULES=N`` runs seeds 1..N, ``LEDGER_JEPSEN_SEED=S`` replays one, and ``LEDGER_JEPSEN_RESULTS=DIR`` keeps each run's figures as
``DIR/run-spark-<metadata>-<seed>.json``.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyspark_ledger.errors import InvalidArgumentError
from pyspark_ledger.testing.jepsen.seeds import seeds_from_env
from pyspark_ledger.testing.jepsen import figures
from pyspark_ledger.testing.faults import schedule as sched
from pyspark_ledger.testing.jepsen.spark_run import KINDS, ZK_KINDS, SparkRunConfig, run
from pyspark_ledger.testing.spark import local_spark_session, spark_unavailable_reason, stop_spark_session
from pyspark_ledger.testing.zookeeper import ZooKeeperServer

MAX_SCHEDULES = 10_000
METADATA = os.environ.get("LEDGER_JEPSEN_METADATA", "sqlite")


def _seeds() -> list[int]:
    return seeds_from_env(default=1, limit=MAX_SCHEDULES)


@pytest.fixture(scope="module")
def spark():
    reason = spark_unavailable_reason()
    if reason:
        pytest.skip(f"the Spark fault run needs pyspark and Java: {reason}")
    session = local_spark_session("jepsen-spark", conf={"spark.master": "local[2,4]"})
    try:
        yield session
    finally:
        stop_spark_session(session)


def _run_and_check(config: SparkRunConfig, tmp_path: Path, spark) -> dict:
    if config.metadata == "zookeeper" and not ZooKeeperServer.is_available():
        pytest.skip(f"ZooKeeper: {ZooKeeperServer.unavailable_reason()}")
    outcome = run(config, tmp_path, spark)
    if os.environ.get("LEDGER_JEPSEN_RESULTS"):
        figures.write(Path(os.environ["LEDGER_JEPSEN_RESULTS"]) / f"run-spark-{config.metadata}-{config.seed}.json",
                      outcome.figures)
    replay = (f"LEDGER_JEPSEN_SEED={config.seed} LEDGER_JEPSEN_METADATA={config.metadata} "
              "python3 -m pytest -q -p no:cacheprovider tests/jepsen/test_spark_faults.py -k under_faults")
    assert outcome.ok, (f"seed {config.seed} ({config.metadata}); replay: {replay}\n"
                        + "\n".join(map(str, outcome.failures)) + f"\nnotes: {outcome.notes}\nschedule:\n"
                        + sched.describe(outcome.steps) + f"\nfigures: {outcome.figures}")
    assert outcome.figures["acknowledged"] > 0, "no batch was committed: the run checked nothing"
    assert sum(outcome.figures["faults"].values()) > 0, outcome.figures
    assert any(batch is not None for batch in outcome.figures["replayed_batches"]), "no batch was replayed"
    return outcome.figures


@pytest.mark.parametrize("seed", _seeds())
def test_a_streaming_write_under_faults_is_exactly_once(seed, tmp_path, spark):
    _run_and_check(SparkRunConfig(seed=seed, metadata=METADATA, kinds=ZK_KINDS if METADATA == "zookeeper" else KINDS),
                   tmp_path, spark)


@pytest.mark.parametrize("kwargs, words", [({"rows_per_batch": 0}, "rows_per_batch"),
                                           ({"max_restarts": 99}, "max_restarts"),
                                           ({"metadata": "etcd"}, "metadata"),
                                           ({"kinds": ZK_KINDS}, "zookeeper")])
def test_bad_run_settings_are_refused(kwargs, words):
    with pytest.raises(InvalidArgumentError, match=words):
        SparkRunConfig(seed=1, **kwargs)
