"""The main job on the cluster: ``ledger demo --cluster`` on the driver host, Spark tasks on two worker hosts
writing and reading through bookies on five other hosts, ZooKeeper metadata on a 3-node ensemble.

A short run (small micro-batches, no kill) is checked by its exit status and
JSON summary: every event the sink committed is read back exactly once with
its content, from ledgers whose ensembles name only the cluster's bookies (by
their hosts' addresses). Then the metadata is read again independently from
the driver host. A cluster file with a ``sqlite:///`` URI, or run from a host
that is not the driver, is refused before Spark starts.

Slow (a few minutes: the cluster's JVMs, then Spark's): runs by default where
namespaces can be made (root; CI runs it), and not with ``LEDGER_CLUSTER_TESTS=0``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from pyspark_ledger.testing.bookies import child_env
from pyspark_ledger.testing.cluster.cluster import DRIVER_NICE
from tests.cluster.conftest import cluster_tests

RUN_TIMEOUT_S = 900
pytestmark = [pytest.mark.timeout(RUN_TIMEOUT_S + 600),
              pytest.mark.skipif(cluster_tests() == "off", reason="LEDGER_CLUSTER_TESTS=0 leaves out the cluster demo")]


def _demo(cluster, *flags: str, timeout_s: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    command = cluster.driver_command(["demo", "--cluster", str(cluster.cluster_file), *flags], nice=DRIVER_NICE)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)


def test_the_demo_runs_exactly_once_on_the_cluster(netns_cluster):
    cluster = netns_cluster
    started = time.monotonic()
    done = _demo(cluster, "--duration", "15", "--rows-per-batch", "2000", "--no-kill", "--json")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, f"exit {done.returncode} after {elapsed:.0f} s:\n{done.stderr[-4000:]}"
    summary = json.loads(done.stdout)
    verdict = summary["verdict"]
    assert summary["passed"] and verdict["rows_read"] == verdict["expected_rows"] > 0, verdict
    assert verdict["distinct_ids"] == verdict["expected_rows"], verdict
    assert verdict["missing"] == verdict["duplicates"] == verdict["unexpected"] == verdict["altered"] == 0, verdict
    assert summary["metadata_uri"] == cluster.metadata_uri and summary["stream"]["ledgers"] > 0
    bookie_ids = {f"{host.address}:3181" for host in cluster.with_role("bookie")}
    assert set(summary["bookie_names"]) == bookie_ids
    # it made no sandbox and says what it did: the cluster keeps running (the table and progress are on stderr)
    assert summary["cluster_file"] and "sandbox" not in done.stderr, done.stderr[-4000:]
    assert "the cluster keeps running" in done.stderr and "keeps running" in done.stderr.split("summary")[-1]
    # read the metadata again, independently, from the driver host: every ledger's ensembles name only the
    # cluster's bookies, by their hosts' addresses
    listing = cluster.run_on("driver", [sys.executable, "-c", ENSEMBLES, cluster.metadata_uri], env=child_env())
    assert listing.returncode == 0, listing.stderr
    used = set(json.loads(listing.stdout))
    assert used and used <= bookie_ids, used
    print(f"cluster demo: {verdict['rows_read']} rows exactly once in {elapsed:.0f} s")


ENSEMBLES = """
import json, sys
from pyspark_ledger.metadata import open_metadata_store
store = open_metadata_store(sys.argv[1])
used = set()
for ledger_id in store.list_ledgers():
    for fragment in store.read_ledger(ledger_id).value.fragments:
        used.update(fragment.bookies)
store.close()
print(json.dumps(sorted(used)))
"""


def test_hosts_reach_the_services_and_the_bookies_registered_their_addresses(netns_cluster):
    cluster = netns_cluster
    for source in ("driver", "worker1", "worker2", "bk1"):
        for host in cluster.with_role("zookeeper"):
            assert cluster.reachable(source, host.name, 2181), (source, host.name)
        for host in cluster.with_role("bookie"):
            assert cluster.reachable(source, host.name, 3181), (source, host.name)
    assert cluster.reachable("worker1", "master", 7077)
    listing = cluster.run_on("driver", [sys.executable, "-m", "pyspark_ledger.cli.main", "--metadata",
                                        cluster.metadata_uri, "--json", "bookies"], env=child_env())
    assert listing.returncode == 0, listing.stderr
    assert {f"{host.address}:3181" for host in cluster.with_role("bookie")} <= set(listing.stdout.split('"')), \
        listing.stdout


def test_the_demo_refuses_a_host_that_is_not_the_driver(netns_cluster, tmp_path):
    cluster = netns_cluster
    command = cluster.driver_command(["demo", "--cluster", str(cluster.cluster_file)], driver="worker1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env=child_env({"TMPDIR": str(tmp_path)}))
    assert done.returncode == 2, done.stderr
    assert list(tmp_path.iterdir()) == []   # refused before making anything
    assert "is not an address of this host" in done.stderr and "Run the demo on the driver host" in done.stderr


def test_the_demo_refuses_sqlite_metadata_on_a_cluster(netns_cluster, tmp_path):
    cluster = netns_cluster
    described = cluster.describe()
    described["metadata_uri"] = f"sqlite:///{tmp_path}/metadata.db"
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(described))
    done = subprocess.run(cluster.driver_command(["demo", "--cluster", str(path)]), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, env=child_env({"TMPDIR": str(tmp_path)}))
    assert done.returncode == 2, done.stderr
    assert "must be a ZooKeeper URI" in done.stderr and "sqlite" in done.stderr
    assert [item.name for item in tmp_path.iterdir()] == ["cluster.json"]   # refused before making anything
