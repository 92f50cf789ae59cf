"""`ledger sandbox` run as a user runs it: a child process, real bookies, signals, restarts."""
from __future__ import annotations

import os
import signal
import socket

import pytest

from pyspark_ledger.sandbox.ports import port_is_free
from pyspark_ledger.testing.zookeeper import ZooKeeperServer

from .conftest import (bookie_alive, listed_bookies, payload, read_payloads, run_ledger, wait_until,
                       write_entries)

LEDGER_ID = 41
ENTRIES = 5


def test_sandbox_keeps_its_bookies_and_their_data_across_restarts(tmp_path, sandbox_command):
    data_dir = str(tmp_path / "cluster")
    first = sandbox_command("--bookies", "3", "--data-dir", data_dir).wait_ready()
    uri = first.metadata_uri
    assert uri == f"sqlite://{data_dir}/metadata.db"
    assert f"export LEDGER_METADATA={uri}" in first.output
    key_file = os.path.join(data_dir, "repair.key")
    assert f"export LEDGER_REPAIR_KEY={key_file}" in first.output
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    key_bytes = open(key_file, "rb").read()
    assert f'.option("metadataServiceUri", "{uri}")' in first.output
    assert f"ledger --metadata {uri} bookies" in first.output
    ids = [bookie_id for bookie_id, _pid in first.bookies]
    assert len(ids) == 3 and sorted(listed_bookies(uri)) == sorted(ids)
    for bookie_id in ids:
        write_entries(bookie_id, LEDGER_ID, ENTRIES, uri)

    second = run_ledger("sandbox", "--data-dir", data_dir)
    assert second.returncode == 1
    assert f"another sandbox (pid {first.process.pid}) is already running on data dir {data_dir}" in second.stderr

    assert first.send(signal.SIGINT) == 0
    assert "sandbox: stopped" in first.output
    assert not [pid for _id, pid in first.bookies if bookie_alive(pid)]

    again = sandbox_command("--data-dir", data_dir).wait_ready()
    assert [bookie_id for bookie_id, _pid in again.bookies] == ids and again.metadata_uri == uri
    assert f"export LEDGER_REPAIR_KEY={key_file}" in again.output
    assert open(key_file, "rb").read() == key_bytes, "the cluster keeps its repair key"
    for bookie_id in ids:
        assert read_payloads(bookie_id, LEDGER_ID, ENTRIES) == [payload(bookie_id, e) for e in range(ENTRIES)]

    crashed_id, crashed_pid = again.bookies[1]
    os.kill(crashed_pid, signal.SIGKILL)
    again.wait_for_line(f"bookie 1 ({crashed_id}, pid {crashed_pid}) exited unexpectedly")
    wait_until(lambda: crashed_id not in listed_bookies(uri), "the killed bookie's lease to expire")
    assert sorted(listed_bookies(uri)) == sorted([ids[0], ids[2]])
    assert again.process.poll() is None

    assert again.send(signal.SIGTERM) == 0
    assert not [pid for _id, pid in again.bookies if bookie_alive(pid)]


def test_a_taken_port_is_named_with_its_process(tmp_path, sandbox_command):
    data_dir = str(tmp_path / "cluster")
    first = sandbox_command("--bookies", "1", "--data-dir", data_dir).wait_ready()
    bookie_id, _pid = first.bookies[0]
    assert first.send(signal.SIGINT) == 0
    port = int(bookie_id.rsplit(":", 1)[1])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        refused = run_ledger("sandbox", "--data-dir", data_dir)
    assert refused.returncode == 1
    assert f"port {port} of bookie {bookie_id} is taken by pid {os.getpid()}" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_more_bookies_are_added_but_fewer_are_refused(tmp_path, sandbox_command):
    data_dir = str(tmp_path / "cluster")
    first = sandbox_command("--bookies", "1", "--data-dir", data_dir).wait_ready()
    assert first.send(signal.SIGINT) == 0
    grown = sandbox_command("--bookies", "2", "--data-dir", data_dir).wait_ready()
    assert grown.bookies[0][0] == first.bookies[0][0] and len(grown.bookies) == 2
    assert grown.send(signal.SIGINT) == 0
    shrunk = run_ledger("sandbox", "--bookies", "1", "--data-dir", data_dir)
    assert shrunk.returncode == 2
    assert f"data dir {data_dir} holds 2 bookies; start it with --bookies 2 or more" in shrunk.stderr


@pytest.mark.parametrize("count", ["0", "-2", "three"])
def test_bad_bookie_count_is_a_usage_error(count):
    result = run_ledger("sandbox", "--bookies", count)
    assert result.returncode == 2
    assert "argument --bookies:" in result.stderr and repr(count) in result.stderr


def test_zookeeper_without_java_says_what_to_install(tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    result = run_ledger("sandbox", "--zookeeper", "--data-dir", str(tmp_path / "cluster"), PATH=str(empty_bin))
    assert result.returncode == 2
    assert "--zookeeper needs a local ZooKeeper" in result.stderr
    assert "apt-get install -y zookeeper" in result.stderr
    assert not (tmp_path / "cluster").exists()


@pytest.mark.zookeeper
@pytest.mark.skipif(not ZooKeeperServer.is_available(), reason=str(ZooKeeperServer.unavailable_reason()))
def test_zookeeper_sandbox_restarts_on_the_same_port_and_data(tmp_path, sandbox_command):
    data_dir = str(tmp_path / "cluster")
    first = sandbox_command("--zookeeper", "--bookies", "1", "--data-dir", data_dir).wait_ready()
    uri = first.metadata_uri
    assert uri.startswith("zk://127.0.0.1:") and uri.endswith("/ledger") and "ZooKeeper metadata" in first.output
    [(bookie_id, pid)] = first.bookies
    assert listed_bookies(uri) == [bookie_id]
    write_entries(bookie_id, LEDGER_ID, ENTRIES, uri)
    assert first.send(signal.SIGINT) == 0
    zookeeper_port = int(uri.split(":")[2].split("/")[0])
    assert not bookie_alive(pid) and port_is_free(zookeeper_port)

    again = sandbox_command("--data-dir", data_dir).wait_ready()
    assert again.metadata_uri == uri and [b for b, _ in again.bookies] == [bookie_id]
    assert listed_bookies(uri) == [bookie_id]
    assert read_payloads(bookie_id, LEDGER_ID, ENTRIES) == [payload(bookie_id, e) for e in range(ENTRIES)]
    assert again.send(signal.SIGINT) == 0
    assert port_is_free(zookeeper_port)
