"""The test cluster in network namespaces (``pyspark_ledger.testing.cluster``): skipped, with the reason,
where this process cannot make namespaces (not root, no ``ip``) or ZooKeeper or Spark is missing."""
from __future__ import annotations

import os

import pytest

from pyspark_ledger.errors import InvalidArgumentError
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
    """The seeds of a cluster fault test: ``LEDGER_JEPSEN_SEED=S``: only S; ``LEDGER_JEPSEN_SCHEDULES=N``: seeds
    1..N (default 1), each on a cluster of its own."""
    if os.environ.get("LEDGER_JEPSEN_SEED"):
        return [int(os.environ["LEDGER_JEPSEN_SEED"])]
    count = int(os.environ.get("LEDGER_JEPSEN_SCHEDULES", "1"))
    if not 1 <= count <= MAX_SCHEDULES:
        raise InvalidArgumentError(f"LEDGER_JEPSEN_SCHEDULES must be in 1..{MAX_SCHEDULES}, got {count}")
    return list(range(1, count + 1))


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
