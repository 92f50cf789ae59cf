"""The test cluster in network namespaces (``pyspark_ledger.testing.cluster``): skipped, with the reason,
where this process cannot make namespaces (not root, no ``ip``) or ZooKeeper or Spark is missing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_ledger.testing.bookies import child_env
from pyspark_ledger.testing.jepsen.seeds import seeds_from_env
from pyspark_ledger.testing.cluster import NetnsCluster, default_spec, netns_unavailable_reason
from pyspark_ledger.testing.spark import spark_unavailable_reason
from pyspark_ledger.testing.zookeeper import ZooKeeperServer


def pytest_configure(config):
    config.addinivalue_line("filterwarnings", "ignore:PySpark does not yet fully support pandas:FutureWarning")


def cluster_tests() -> str:
    """How much of the cluster runs: ``LEDGER_CLUSTER_TESTS`` unset runs the main job on the cluster and the
    bookie cut from ZooKeeper (a few minutes; CI, as root, runs them); ``1`` adds the seeded fault schedules;
    ``0`` runs none of the long ones. Anything else is refused."""
    value = os.environ.get("LEDGER_CLUSTER_TESTS", "")
    if value not in ("", "0", "1"):
        raise pytest.UsageError(f"LEDGER_CLUSTER_TESTS must be 0, 1 or unset, not {value!r}")
    return {"": "main", "0": "off", "1": "all"}[value]


MAX_SCHEDULES = 10_000


def jepsen_seeds() -> list[int]:
    """The seeds of a cluster fault test (``LEDGER_JEPSEN_SEED`` / ``LEDGER_JEPSEN_SCHEDULES``, default 1), each on
    a cluster of its own."""
    return seeds_from_env(default=1, limit=MAX_SCHEDULES)


def run_on_driver(cluster, module: str, seed: int, run_dir: Path, *, up_s: float, timeout_s: float,
                  nice: int | None = None) -> tuple[dict, subprocess.CompletedProcess]:
    """``python -m module --cluster FILE --seed SEED --dir RUN_DIR`` on the cluster's driver host (under ``nice -n``
    if given): the figures it printed as its last line, with the cluster's start-up (``up_s``) and the run's own
    seconds added, and the finished process. Fails the test when it printed nothing."""
    command = ["ip", "netns", "exec", cluster.hosts["driver"].netns,
               *(["nice", "-n", str(nice)] if nice is not None else []), sys.executable, "-m", module,
               "--cluster", str(cluster.cluster_file), "--seed", str(seed), "--dir", str(run_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=child_env(),
                          stdin=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[2])
    lines = done.stdout.strip().splitlines()
    assert lines, f"seed {seed}: the run printed nothing (exit {done.returncode}):\n{done.stderr[-6000:]}"
    numbers = json.loads(lines[-1])
    numbers["cluster_up_s"] = round(up_s, 1)
    return numbers, done


def skip_unless_netns() -> None:
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"needs network namespaces: {reason}")


def skip_unless_services() -> None:
    skip_unless_netns()
    reason = ZooKeeperServer.unavailable_reason() or spark_unavailable_reason()
    if reason:
        pytest.skip(f"needs ZooKeeper and Spark: {reason}")


@pytest.fixture(scope="module")
def netns_cluster():
    """The cluster of issue 17 (3 ZooKeeper hosts, 5 bookies in 2 zones, a Spark master, 2 workers, a driver
    host); removed after the module's tests, also when they fail."""
    skip_unless_services()
    with NetnsCluster(default_spec()) as cluster:
        yield cluster
