"""Bookie process lifecycle: registration, graceful stop, cookies (docs/protocol.md B3), start-up failures, the CLI."""
from __future__ import annotations

import shutil
import socket
import subprocess
import threading

import pytest

from pyspark_ledger.client import BookieStatus
from pyspark_ledger.errors import BookieError, BookieProcessError
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.testing.bookies import BookieCluster, BookieProcess, free_port, run_bookie_server
from pyspark_ledger.testing.zookeeper import ZooKeeperServer

from .conftest import KEY, entry, wait_until


def assert_one_clear_line(bookie: BookieProcess, *words: str) -> None:
    """The failed start left a single 'bookie-server:' line naming the problem, no traceback."""
    stderr = (bookie.data_dir / "bookie-stderr.log").read_text()
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("bookie-server:")]
    assert len(lines) == 1, stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_registration_appears_and_a_sigterm_removes_it_with_exit_0(make_bookie, metadata_store, tmp_path):
    bookie = make_bookie().start()
    registered = metadata_store.bookies()[bookie.bookie_id]
    assert registered.read_only is False
    assert registered.info["host"] == "127.0.0.1" and registered.info["port"] == bookie.port
    assert registered.info["version"] and registered.info["data_dir"] == str(tmp_path / "bookie")
    assert f":{registered.info['metrics_port']}/" in bookie.metrics_url
    assert registered.info["metrics_url"] == bookie.metrics_url
    assert bookie.stop() == 0
    assert bookie.bookie_id not in metadata_store.bookies()
    stdout = (bookie.data_dir / "bookie-stdout.log").read_text()
    assert f"bookie {bookie.bookie_id} ready" in stdout


def test_cluster_starts_registered_bookies_and_stops_them_all(tmp_path, metadata_uri, metadata_store, client_for):
    with BookieCluster(3, tmp_path / "cluster", metadata_uri) as cluster:
        assert set(metadata_store.bookies()) == {bookie.bookie_id for bookie in cluster}
        assert len({bookie.port for bookie in cluster}) == 3
        for bookie in cluster:
            assert client_for(bookie).info().bookie_id == bookie.bookie_id
    assert [bookie.returncode for bookie in cluster] == [0, 0, 0]
    assert metadata_store.bookies() == {}


def test_a_killed_bookie_registration_expires(make_bookie, metadata_store):
    bookie = make_bookie().start()
    assert bookie.bookie_id in metadata_store.bookies()
    bookie.kill()
    wait_until(lambda: bookie.bookie_id not in metadata_store.bookies(), 30, "the lease to expire")


@pytest.mark.zookeeper
def test_zookeeper_registration_vanishes_after_kill9(tmp_path):
    reason = ZooKeeperServer.unavailable_reason()
    if reason:
        pytest.skip(f"needs a local ZooKeeper: {reason}")
    with ZooKeeperServer(tmp_path / "zk") as zookeeper:
        uri = zookeeper.uri("/bookie-test", session_timeout=1)
        bookie = BookieProcess(tmp_path / "bookie", uri)
        store = open_metadata_store(uri, create=True)
        try:
            bookie.start()
            assert bookie.bookie_id in store.bookies()
            bookie.kill()
            wait_until(lambda: bookie.bookie_id not in store.bookies(), 30, "the ZooKeeper session to expire")
        finally:
            bookie.kill()
            store.close()


def test_sigterm_answers_every_inflight_add_and_exits_0(make_bookie, client_for):
    bookie = make_bookie().start()
    stream = client_for(bookie).add_stream(max_inflight=500)
    futures = []
    adding = threading.Event()

    def produce() -> None:
        for e in range(100_000):
            future = stream.add(600, e, KEY, entry(600, e))
            futures.append(future)
            adding.set()
            if future.done() and future.exception() is not None:
                return

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        adding.wait(30)
        wait_until(lambda: sum(f.done() for f in list(futures)) >= 200, 30, "acknowledged adds")
        assert bookie.stop() == 0
    finally:
        producer.join(60)
    assert not producer.is_alive()
    acked = [e for e, f in enumerate(futures) if f.exception(30) is None and f.result().ok]
    refused = [f.result().status for f in futures if f.exception() is None and not f.result().ok]
    assert acked == list(range(len(acked))) and len(acked) >= 200
    assert set(refused) <= {BookieStatus.READ_ONLY}
    assert all(isinstance(f.exception(), BookieError) for f in futures if f.exception() is not None)
    bookie.start()
    reply = client_for(bookie).read(600, 0, len(acked) - 1, master_key=KEY)
    assert reply.entries == tuple((e, entry(600, e)) for e in acked)


def test_wiped_or_missing_data_dir_refuses_to_start(make_bookie):
    """B3: a bookie id that ran before never comes back silently empty."""
    bookie = make_bookie()
    bookie.start()
    assert bookie.stop() == 0
    shutil.rmtree(bookie.data_dir)
    with pytest.raises(BookieProcessError, match="exited with status 1"):
        bookie.start()
    assert_one_clear_line(bookie, "no cookie", "wiped", "--allow-new-data-dir")
    bookie.flags["allow_new_data_dir"] = True
    bookie.start()
    assert bookie.stop() == 0


def test_swapped_data_dir_refuses_to_start(make_bookie):
    """B3: two bookies, each started on the other's data dir."""
    first, second = make_bookie("first"), make_bookie("second")
    first.start(), second.start()
    assert first.stop() == 0 and second.stop() == 0
    swapped = BookieProcess(second.data_dir, first.metadata_uri, port=first.port)
    with pytest.raises(BookieProcessError, match="exited with status 1"):
        swapped.start()
    assert_one_clear_line(swapped, f"belongs to bookie {second.bookie_id}")
    # a data dir re-created for the same id (new instance) is refused even with files in it
    (first.data_dir / "COOKIE.json").write_bytes((second.data_dir / "COOKIE.json").read_bytes()
                                                 .replace(second.bookie_id.encode(), first.bookie_id.encode()))
    with pytest.raises(BookieProcessError, match="exited with status 1"):
        first.start()
    assert_one_clear_line(first, "differs")


def test_port_in_use_fails_with_one_clear_line(make_bookie):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bookie = make_bookie(port=taken.getsockname()[1])
        with pytest.raises(BookieProcessError, match="exited with status 1"):
            bookie.start()
    assert_one_clear_line(bookie, "cannot listen", "--port")


def test_data_dir_that_is_a_file_fails_with_one_clear_line(tmp_path, metadata_uri):
    not_a_dir = tmp_path / "plain-file"
    not_a_dir.write_text("x")
    process = BookieProcess(not_a_dir, metadata_uri).run_to_exit()
    assert process.returncode == 1
    assert_clear_last_line(process, "not a directory")


def test_unreachable_metadata_store_fails_with_one_clear_line(tmp_path):
    uri = f"zk://127.0.0.1:{free_port()}/nothing-listens?session_timeout=1"
    process = BookieProcess(tmp_path / "bookie", uri).run_to_exit(timeout=120)
    assert process.returncode == 1
    assert_clear_last_line(process, "ZooKeeper")


def test_invalid_metadata_uri_fails_with_the_accepted_forms(tmp_path):
    process = BookieProcess(tmp_path / "bookie", "mysql://somewhere/db").run_to_exit()
    assert process.returncode == 1
    assert_clear_last_line(process, "sqlite:///")


@pytest.mark.parametrize("flags, complaint", [
    (["--port", "seventy"], "--port"),
    (["--port", "70000"], "--port"),
    (["--port", "3181", "--max-entry-size", "0"], "--max-entry-size"),
    (["--port", "3181", "--log-level", "LOUD"], "--log-level"),
    (["--port", "3181", "--metrics-port", "-5"], "--metrics-port"),
    (["--port", "3181", "--bookie-id", "a/b"], "--bookie-id"),
    (["--port", "3181", "--adopt-metadata-store", "new"], "--adopt-metadata-store"),
])
def test_invalid_flags_exit_2_naming_the_flag(tmp_path, flags, complaint):
    process = run_bookie_server(["--data-dir", str(tmp_path), "--metadata", f"sqlite:///{tmp_path}/m.db", *flags])
    assert process.returncode == 2
    assert complaint in process.stderr and "Traceback" not in process.stderr
    assert not (tmp_path / "m.db").exists()


def assert_clear_last_line(process: subprocess.CompletedProcess, *words: str) -> None:
    assert "Traceback" not in process.stderr, process.stderr
    last = process.stderr.strip().splitlines()[-1]
    assert last.startswith("bookie-server:"), process.stderr
    for word in words:
        assert word in last, last
