"""Fixtures for client tests: fake bookies (in memory) and a real SQLite metadata store in tmp_path."""
from __future__ import annotations

import threading

import pytest

from pyspark_ledger.client.config import ClientConfig
from pyspark_ledger.client.ledger_client import LedgerClient
from pyspark_ledger.metadata import open_metadata_store
from pyspark_ledger.testing.fake_bookies import FakeCluster
from pyspark_ledger.testing.metadata_hooks import HookedStore
from tests.waiting import wait_until  # noqa: F401 - the tests import it from here

PASSWORD = b"secret"
# Short timeouts keep failure paths quick; speculative reads only where a test asks for them.
FAST = dict(add_timeout_s=5.0, read_timeout_s=5.0, close_timeout_s=5.0, recovery_timeout_s=30.0,
            speculative_read_delay_s=None, long_poll_timeout_s=1.0)


@pytest.fixture
def store(tmp_path):
    """A real SQLite store, wrapped so tests can intercept compare-and-sets."""
    inner = open_metadata_store(f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2&poll_interval=0.1", create=True)
    hooked = HookedStore(inner)
    try:
        yield hooked
    finally:
        hooked.close()


@pytest.fixture
def cluster(request):
    marker = request.node.get_closest_marker("bookies")
    size = marker.args[0] if marker else 4
    fake = FakeCluster(size)
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def make_client(store, cluster):
    """``make_client(**config)``: a LedgerClient over the fakes; every one is closed at teardown."""
    clients: list[LedgerClient] = []

    def make(seed: int = 1, **overrides) -> LedgerClient:
        config = ClientConfig(**{**FAST, "placement_seed": seed, **overrides})
        clients.append(LedgerClient(store, config, transport=cluster.transport()))
        return clients[-1]

    try:
        yield make
    finally:
        for client in clients:
            client.close()


@pytest.fixture
def client(make_client):
    return make_client()


class Gate:
    """Blocks a metadata write in a store hook until the test opens it."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self._open = threading.Event()

    def hook(self, metadata, version) -> None:
        self.reached.set()
        if not self._open.wait(30):
            raise AssertionError("the gate was never opened")

    def open(self) -> None:
        self._open.set()


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "bookies(n): number of fake bookies for this test (default 4)")
