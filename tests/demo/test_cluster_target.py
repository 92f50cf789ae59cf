"""``ledger demo --cluster FILE``: the cluster file is checked before Spark starts, and stands in for the sandbox
(bookies by id and pid, a kill -9 of one through its process group)."""
from __future__ import annotations

import json
import subprocess
import time

import pytest

from pyspark_ledger.demo.cluster_target import load_target, local_addresses
from pyspark_ledger.demo.job import DemoConfig
from pyspark_ledger.errors import InvalidConfigurationError

ZK = "zk://10.9.9.11:2181,10.9.9.12:2181/ledger"


def _file(tmp_path, **changes) -> str:
    data = {"metadata_uri": ZK, "spark_conf": {"spark.master": "spark://10.9.9.19:7077",
                                               "spark.driver.host": "127.0.0.1"},
            "hosts": [{"name": "bk1", "address": "10.9.9.14",
                       "processes": {"bookie": {"bookie_id": "10.9.9.14:3181", "pid": None}}},
                      {"name": "driver", "address": "127.0.0.1", "processes": {}}]}
    data.update(changes)
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_cluster_file_becomes_the_demo_s_target(tmp_path):
    target = load_target(_file(tmp_path))
    assert target.metadata_uri == ZK and target.spark_conf["spark.master"] == "spark://10.9.9.19:7077"
    assert [bookie.bookie_id for bookie in target.bookies] == ["10.9.9.14:3181"]
    assert target.poll_exits() == [] and "127.0.0.1" in local_addresses()


@pytest.mark.parametrize("changes,words", [
    ({"metadata_uri": "sqlite:///tmp/m.db"}, "must be a ZooKeeper URI"),
    ({"spark_conf": {"spark.master": "local[2]", "spark.driver.host": "127.0.0.1"}}, "spark.master = spark://"),
    ({"spark_conf": {"spark.master": "spark://10.9.9.19:7077", "spark.driver.host": "10.9.9.22"}},
     "is not an address of this host"),
    ({"hosts": [{"name": "bk1", "address": "10.9.9.14", "processes": {"bookie": {"pid": 5}}}]}, "has no bookie_id"),
])
def test_a_file_a_remote_executor_could_not_use_is_refused(tmp_path, changes, words):
    with pytest.raises(InvalidConfigurationError, match=words):
        load_target(_file(tmp_path, **changes))


def test_garbage_and_a_missing_file_are_refused(tmp_path):
    (tmp_path / "bad.json").write_text("[1, 2")
    for path in (tmp_path / "bad.json", tmp_path / "missing.json"):
        with pytest.raises(InvalidConfigurationError, match="cannot read a cluster file"):
            load_target(path)


def test_a_bookie_is_killed_through_its_process_group(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        hosts = [{"name": "bk1", "address": "10.9.9.14",
                  "processes": {"bookie": {"bookie_id": "10.9.9.14:3181", "pid": sleeper.pid}}}]
        target = load_target(_file(tmp_path, hosts=hosts))
        assert target.bookies[0].is_running()
        target.kill_bookie(0)
        assert sleeper.wait(10) == -9
        assert not target.bookies[0].is_running() and target.poll_exits() == []   # killed on purpose: not reported
    finally:
        sleeper.kill()
        sleeper.wait()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def test_a_bookie_is_paused_and_continued_through_its_process_group(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        hosts = [{"name": "bk1", "address": "10.9.9.14",
                  "processes": {"bookie": {"bookie_id": "10.9.9.14:3181", "pid": sleeper.pid}}}]
        target = load_target(_file(tmp_path, hosts=hosts))
        target.pause_bookie(0)
        _wait_for(lambda: _state(sleeper.pid) == "T")
        assert target.bookies[0].is_running()  # paused, not dead
        target.resume_bookie(0)
        _wait_for(lambda: _state(sleeper.pid) == "S")
    finally:
        sleeper.kill()
        sleeper.wait()


def _wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the process did not change state in time"
        time.sleep(0.01)


def test_cluster_and_data_dir_exclude_each_other():
    with pytest.raises(InvalidConfigurationError, match="exclude each other"):
        DemoConfig(cluster_file="c.json", data_dir="/tmp/x").check()
    with pytest.raises(InvalidConfigurationError, match="--rows-per-batch"):
        DemoConfig(rows_per_batch=10).check()
