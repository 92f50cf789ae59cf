"""Fixtures for integration tests: real bookie processes with SQLite and with a real ZooKeeper."""
from __future__ import annotations

import dataclasses

import pytest

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.testing.bookies import BookieCluster
from tests.conftest import backend_uri
from tests.waiting import wait_until  # noqa: F401 - the tests import it from here

PASSWORD = b"integration"
CONFIG = ClientConfig(add_timeout_s=5.0, read_timeout_s=5.0, recovery_timeout_s=60.0, close_timeout_s=30.0,
                      long_poll_timeout_s=1.0)


@pytest.fixture(params=["sqlite", "zookeeper"])
def metadata_uri(request, tmp_path) -> str:
    return backend_uri(request, tmp_path, request.param)


@pytest.fixture
def bookies(request, tmp_path, metadata_uri):
    """A started BookieCluster (4 bookies unless the test is marked ``bookies(n)``); stopped at teardown."""
    marker = request.node.get_closest_marker("bookies")
    cluster = BookieCluster(marker.args[0] if marker else 4, tmp_path / "bookies", metadata_uri)
    cluster.start()
    try:
        yield cluster
    finally:
        for bookie in cluster.bookies:
            bookie.kill()


@pytest.fixture
def make_client(metadata_uri, bookies):
    clients: list[LedgerClient] = []

    def make(**overrides) -> LedgerClient:
        config = dataclasses.replace(CONFIG, **overrides)
        clients.append(LedgerClient(metadata_uri, config))
        wait_until(lambda: len(clients[-1].bookies()) >= len(bookies), what="every bookie to register")
        return clients[-1]

    try:
        yield make
    finally:
        for client in clients:
            client.close()


def payload(index: int, size: int = 512) -> bytes:
    """A payload that names its index, so any mix-up shows."""
    head = b"entry %08d " % index
    return (head * (size // len(head) + 1))[:size]


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "bookies(n): number of bookie processes for this test (default 4)")
