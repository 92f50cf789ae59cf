"""The corruption suite: the fake-bookie fixtures of the client tests (for exact protocol interleavings) and the
real-process fixtures of ``real_cluster.py``."""
from __future__ import annotations

import pytest

from tests.client.conftest import client, make_client, store  # noqa: F401 - fixtures re-exported


@pytest.fixture
def cluster():
    from pyspark_ledger.testing.fake_bookies import FakeCluster

    fake = FakeCluster(3)
    try:
        yield fake
    finally:
        fake.close()
