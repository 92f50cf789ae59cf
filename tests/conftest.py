"""Fixtures shared by every test directory: one real ZooKeeper server for the whole run, and test-unique
metadata URIs on it or on SQLite."""
from __future__ import annotations

import os
import re
import uuid

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run unless LEDGER_HYPOTHESIS_EXPLORE=N asks for N fresh
# random examples per test: CI fails on a change, never on a draw; exploring is run on purpose and a
# failure it finds prints the example to pin with ``@example``.
settings.register_profile("repeatable", derandomize=True, database=None)
_EXPLORE = os.environ.get("LEDGER_HYPOTHESIS_EXPLORE", "")
if _EXPLORE:
    if not _EXPLORE.isdigit() or not 1 <= int(_EXPLORE) <= 100_000:
        raise pytest.UsageError(f"LEDGER_HYPOTHESIS_EXPLORE must be a number of examples from 1 to 100000, "
                                f"not {_EXPLORE!r}")
    settings.register_profile("explore", max_examples=int(_EXPLORE), derandomize=False)
    settings.load_profile("explore")
else:
    settings.load_profile("repeatable")

from pyspark_ledger.testing.zookeeper import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper_server():
    """A real ZooKeeper on 127.0.0.1, started once per test run (the test is skipped if none is installed)."""
    reason = ZooKeeperServer.unavailable_reason()
    if reason:
        pytest.skip(f"needs a local ZooKeeper (CI installs Debian's zookeeper package): {reason}")
    with ZooKeeperServer() as server:
        yield server


def unique_chroot(request, prefix: str = "") -> str:
    """A ZooKeeper chroot no other test uses: the test's name, sanitised, and a random suffix."""
    return f"/{prefix}{re.sub(r'[^A-Za-z0-9_]+', '-', request.node.name)[:50]}-{uuid.uuid4().hex[:8]}"


def backend_uri(request, tmp_path, backend: str) -> str:
    """This test's metadata URI on ``backend`` ("sqlite" or "zookeeper"), with short liveness timeouts."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/metadata.db?lease_seconds=2&poll_interval=0.1"
    return request.getfixturevalue("zookeeper_server").uri(unique_chroot(request), session_timeout=2)
