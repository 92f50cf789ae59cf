"""Fixtures of the Spark connector tests: one local SparkSession for the whole run, a sandbox per module.

Spark takes 6-9 s to start, so every test that needs it shares the session;
tests that only need pure modules never start it. Without pyspark (or Java)
the Spark tests are skipped with the reason. ``cluster`` is a sandbox of real
bookies for the module that asks for it (a module may define its own).
"""
from __future__ import annotations

import pytest

from pyspark_ledger.testing.spark import local_spark_session, spark_unavailable_reason, stop_spark_session


def pytest_configure(config):
    # pyspark 4.3 warns about pandas 3 on every session start (a known, harmless mismatch)
    config.addinivalue_line("filterwarnings",
                            "ignore:PySpark does not yet fully support pandas:FutureWarning")


@pytest.fixture(scope="session")
def spark():
    """A local SparkSession on 127.0.0.1, stopped (JVM included) after the run."""
    reason = spark_unavailable_reason()
    if reason:
        pytest.skip(f"Spark tests need pyspark and Java: {reason}")
    session = local_spark_session("pyspark-ledger-tests")
    try:
        yield session
    finally:
        stop_spark_session(session)


@pytest.fixture(scope="module")
def cluster():
    """A sandbox of real bookies for one test module; its cached executor clients are closed with it."""
    from pyspark_ledger.spark import executor
    from tests.spark.read_helpers import start_sandbox

    sandbox = start_sandbox()
    try:
        yield sandbox
    finally:
        executor.close_all(sandbox.metadata_uri)
        sandbox.stop()
