"""A real 3-bookie sandbox shared by the CLI tests of one module, a client of it, and the CLI run against it."""
from __future__ import annotations

import pytest

from pyspark_ledger import LedgerClient
from pyspark_ledger.sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    with Sandbox(bookies=3, data_dir=tmp_path_factory.mktemp("sandbox") / "cluster") as sb:
        yield sb


@pytest.fixture()
def client(sandbox):
    with LedgerClient(sandbox.metadata_uri) as client:
        yield client


def ledger(sandbox, *args):
    """``ledger --metadata <the sandbox> ARGS`` in a subprocess."""
    from tests.cli.test_admin_cli import run_ledger
    return run_ledger("--metadata", sandbox.metadata_uri, *args)
