"""A real 3-bookie sandbox shared by the CLI tests of one module."""
from __future__ import annotations

import pytest

from pyspark_ledger.sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    with Sandbox(bookies=3, data_dir=tmp_path_factory.mktemp("sandbox") / "cluster") as sb:
        yield sb
