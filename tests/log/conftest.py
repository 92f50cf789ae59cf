"""Fixtures for the log layer: real bookie processes (one cluster per metadata backend and test session),
a StreamClient per test, and a fresh stream name per test."""
from __future__ import annotations

import re
import uuid

import pytest

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.log.stream_client import StreamClient
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.testing.bookies import BookieCluster
from tests.waiting import wait_until  # noqa: F401 - the tests import it from here

PASSWORD = b"log-layer"
BOOKIES = 3
CONFIG = ClientConfig(add_timeout_s=5.0, read_timeout_s=5.0, recovery_timeout_s=60.0, close_timeout_s=30.0,
                      long_poll_timeout_s=0.5, speculative_read_delay_s=None)


@pytest.fixture(scope="session")
def sqlite_cluster(tmp_path_factory):
    """(metadata URI, started BookieCluster) on an SQLite metadata file; stopped at the end of the session."""
    base = tmp_path_factory.mktemp("log-sqlite")
    uri = f"sqlite:///{base}/metadata.db?lease_seconds=2&poll_interval=0.1"
    with BookieCluster(BOOKIES, base / "bookies", uri) as cluster:
        yield uri, cluster


@pytest.fixture(scope="session")
def zookeeper_cluster(tmp_path_factory, zookeeper_server):
    """(metadata URI, started BookieCluster) on the run's real ZooKeeper server (skipped without one)."""
    base = tmp_path_factory.mktemp("log-zk")
    uri = zookeeper_server.uri(f"/log-layer-{uuid.uuid4().hex[:8]}", session_timeout=2)
    with BookieCluster(BOOKIES, base / "bookies", uri) as cluster:
        yield uri, cluster


@pytest.fixture(params=["sqlite"])
def metadata_uri(request) -> str:
    """The metadata URI of a running cluster; tests parametrize it with ``zookeeper`` where welcome."""
    return request.getfixturevalue(f"{request.param}_cluster")[0]


@pytest.fixture
def make_streams(metadata_uri):
    """``make_streams(**kwargs)``: a StreamClient on its own store and client; all closed at teardown.

    ``store_wrapper`` wraps the opened store (e.g. in a HookedStore) before the client is built on it.
    """
    opened: list[tuple[StreamClient, object]] = []

    def make(store_wrapper=None, **kwargs) -> StreamClient:
        store = open_metadata_store(metadata_uri)
        store = store_wrapper(store) if store_wrapper else store
        client = LedgerClient(store, CONFIG)
        streams = StreamClient(store, password=PASSWORD, client=client, **kwargs)
        opened.append((streams, store))
        wait_until(lambda: len(client.bookies(writable_only=True)) >= BOOKIES, what="every bookie to register")
        return streams

    try:
        yield make
    finally:
        for streams, store in opened:
            streams.client.close()
            store.close()


@pytest.fixture
def streams(make_streams) -> StreamClient:
    return make_streams()


@pytest.fixture
def stream_name(request) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_-]+', '-', request.node.name)[:60]}-{uuid.uuid4().hex[:8]}"


def payload(index: int, size: int = 64) -> bytes:
    """A payload naming its index, so a mix-up shows."""
    head = b"entry %08d " % index
    return (head * (size // len(head) + 1))[:size]
