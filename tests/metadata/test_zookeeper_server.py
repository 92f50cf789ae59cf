"""The ZooKeeperServer test helper: start, answer, stop, restart with its data."""
from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from pyspark_ledger.errors import MetadataError
from pyspark_ledger.testing.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.zookeeper, pytest.mark.skipif(not ZooKeeperServer.is_available(),
                                reason=f"needs ZooKeeper: {ZooKeeperServer.unavailable_reason()}")]


def test_uri_and_connect_string_point_at_loopback(zookeeper_server):
    port = zookeeper_server.port
    assert zookeeper_server.connect_string == f"127.0.0.1:{port}"
    assert zookeeper_server.uri("/a", session_timeout=3) == f"zk://127.0.0.1:{port}/a?session_timeout=3"
    assert zookeeper_server.uri("b") == f"zk://127.0.0.1:{port}/b"
    assert zookeeper_server.is_serving()
    assert zookeeper_server.four_letter_word("ruok") == "imok"


def test_unstarted_server_has_no_port(tmp_path):
    server = ZooKeeperServer(tmp_path)
    with pytest.raises(MetadataError, match="start"):
        server.connect_string
    assert not server.running


def test_stop_kills_the_process_and_start_brings_the_data_back(tmp_path):
    server = ZooKeeperServer(tmp_path / "zk")
    try:
        server.start()
        _write(server.connect_string, "/kept", b"data")
        process = server._process
        server.stop()
        server.stop()
        assert process.poll() is not None and not server.running
        assert not server.is_serving()
        server.start()
        assert server.is_serving()
        assert _read(server.connect_string, "/kept") == b"data"
    finally:
        server.close()
    assert (tmp_path / "zk").exists()  # a directory given by the caller is left in place


def test_context_manager_removes_its_own_temporary_directory():
    with ZooKeeperServer() as server:
        base_dir = server.base_dir
        assert server.log_path.parent == base_dir
    assert not server.running
    assert not base_dir.exists()


def _write(hosts: str, path: str, value: bytes) -> None:
    client = KazooClient(hosts=hosts, timeout=5)
    client.start(timeout=10)
    try:
        client.create(path, value)
    finally:
        client.stop()
        client.close()


def _read(hosts: str, path: str) -> bytes:
    client = KazooClient(hosts=hosts, timeout=5)
    client.start(timeout=10)
    try:
        return client.get(path)[0]
    finally:
        client.stop()
        client.close()
