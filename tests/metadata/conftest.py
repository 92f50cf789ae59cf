"""Fixtures: one real ZooKeeper per test session, a fresh store per test and backend."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest

from pyspark_ledger.metadata import open_metadata_store
from tests.conftest import unique_chroot

# Short liveness settings so expiry tests finish fast.
SQLITE_PARAMS = {"lease_seconds": 1, "poll_interval": 0.05}
ZOOKEEPER_PARAMS = {"session_timeout": 2}


@pytest.fixture(params=[pytest.param("sqlite"),
                        pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_uri(backend, request, tmp_path):
    """``store_uri(**params)``: this test's store URI (unique chroot or file)."""
    if backend == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        chroot = unique_chroot(request)
        return lambda **params: server.uri(chroot, **{**ZOOKEEPER_PARAMS, **params})
    path = tmp_path / "metadata" / "metadata.db"
    return lambda **params: f"sqlite://{path}?{urlencode({**SQLITE_PARAMS, **params})}"


@pytest.fixture
def open_store(store_uri):
    """``open_store(**params)``: another store object on this test's data; closed at teardown."""
    stores = []

    def make(**params):
        stores.append(open_metadata_store(store_uri(**params), create=True))
        return stores[-1]

    yield make
    for opened in reversed(stores):
        opened.close()


@pytest.fixture
def quick(backend) -> dict:
    """URI parameters for a store whose liveness expires fast (1 s)."""
    return {"session_timeout": 1} if backend == "zookeeper" else {"lease_seconds": 1}


@pytest.fixture
def store(open_store):
    return open_store()
