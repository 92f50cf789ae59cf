"""A local SparkSession for tests, notebooks and benchmarks, and its clean shutdown.

Spark's start-up takes seconds (docs/measurements.md, "Spark start-up"), so a test run shares
one session (``tests/spark/conftest.py``)::

    spark = local_spark_session()
    try:
        spark.range(3).count()
    finally:
        stop_spark_session(spark)

The session binds to 127.0.0.1 only, has no UI, few shuffle partitions, and
its Python workers run this interpreter (``PYSPARK_PYTHON``), so they import
the same pyspark-ledger. ``stop_spark_session`` also ends the JVM that pyspark
started, so no process outlives the caller.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from types import ModuleType
from typing import Any, Mapping

LOCAL_IP = "127.0.0.1"
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": LOCAL_IP,
    "spark.driver.bindAddress": LOCAL_IP,
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.streaming.schemaInference": "false",
    "spark.python.worker.reuse": "true",
}
_JVM_EXIT_SECONDS = 20.0


def spark_unavailable_reason() -> str:
    """Why a local session cannot start here ('' when it can)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'pyspark-ledger[spark]')"
    if not (os.environ.get("JAVA_HOME") or _on_path("java")):
        return "no Java runtime: install Java 17 or set JAVA_HOME"
    return ""


def local_spark_session(app_name: str = "pyspark-ledger", *, cores: int = 2,
                        conf: Mapping[str, Any] | None = None, log_level: str = "ERROR"):
    """A local-mode SparkSession on 127.0.0.1 (``getOrCreate``: shared if one exists)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = LOCAL_IP
    settings = {**DEFAULT_CONF, "spark.sql.warehouse.dir": _warehouse_dir(),
                **{key: str(value) for key, value in (conf or {}).items()}}
    builder = SparkSession.builder.master(f"local[{int(cores)}]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def stop_spark_session(spark) -> None:
    """Stop ``spark`` and the JVM gateway process pyspark launched for it (bounded wait)."""
    from pyspark import SparkContext

    if SparkContext._gateway is None:  # another fixture sharing this session (getOrCreate) stopped it already
        return
    spark.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    process = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if process is not None:
        _end_process(process)


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


def _end_process(process: subprocess.Popen) -> None:
    if process.stdin is not None:
        process.stdin.close()  # the gateway exits when its stdin closes
    try:
        process.wait(timeout=_JVM_EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=_JVM_EXIT_SECONDS)


def _warehouse_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"pyspark-ledger-warehouse-{os.getpid()}")


def _on_path(program: str) -> bool:
    return any(os.access(os.path.join(folder, program), os.X_OK)
               for folder in os.environ.get("PATH", "").split(os.pathsep) if folder)
