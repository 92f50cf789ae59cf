"""One local SparkSession for the demo's unit tests that need Spark (skipped without pyspark or Java)."""
from __future__ import annotations

import pytest

from pyspark_ledger.testing.spark import local_spark_session, spark_unavailable_reason, stop_spark_session


def pytest_configure(config):
    # pyspark 4.3 warns about pandas 3 on every session start (a known, harmless mismatch)
    config.addinivalue_line("filterwarnings",
                            "ignore:PySpark does not yet fully support pandas:FutureWarning")


@pytest.fixture(scope="module")
def spark():
    reason = spark_unavailable_reason()
    if reason:
        pytest.skip(f"needs pyspark and Java: {reason}")
    session = local_spark_session("pyspark-ledger-demo-tests")
    try:
        yield session
    finally:
        stop_spark_session(session)
