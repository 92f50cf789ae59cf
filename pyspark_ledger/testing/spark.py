"""A local SparkSession for tests and benchmarks, and its clean shutdown.

Spark's start-up takes seconds (docs/measurements.md, "Spark start-up"), so a test run shares
one session (``tests/spark/conftest.py``)::

    spark = local_spark_session()
    try:
        spark.range(3).count()
    finally:
        stop_spark_session(spark)

This is the public helper ``pyspark_ledger.spark.session.spark_session`` with
the JVM's output left on this process's stderr (tests and benchmarks want to
see it); ``stop_spark_session`` is the public one. ``register_data_source``
registers data source classes defined in tests and benchmarks.
"""
from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Mapping

from pyspark_ledger.spark.session import DEFAULT_CONF, LOCAL_IP, spark_session, spark_unavailable_reason
from pyspark_ledger.spark.session import stop_spark_session

__all__ = ["DEFAULT_CONF", "LOCAL_IP", "local_spark_session", "register_data_source", "spark_unavailable_reason",
           "stop_spark_session"]


def local_spark_session(app_name: str = "pyspark-ledger", *, cores: int = 2,
                        conf: Mapping[str, Any] | None = None, log_level: str = "ERROR"):
    """A local-mode SparkSession on 127.0.0.1 (``getOrCreate``: shared if one exists); JVM output on stderr."""
    return spark_session(app_name, cores=cores, conf=conf, log_level=log_level, log_file=None)


def register_data_source(spark, data_source_class: type) -> None:
    """Register a DataSource class whose module the Python workers may not import.

    Classes defined in test files or benchmark scripts are pickled by value,
    so Spark's workers need not find their module on ``sys.path``.
    """
    from pyspark import cloudpickle

    module = sys.modules[data_source_class.__module__]
    if not _is_installed(module):
        cloudpickle.register_pickle_by_value(module)
    spark.dataSource.register(data_source_class)


def _is_installed(module: ModuleType) -> bool:
    return module.__name__.split(".")[0] in ("pyspark_ledger", "pyspark")
